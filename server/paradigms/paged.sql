-- perceptlab_page_answered: what storing an answer does to its page, for the one-statement functions of
-- the paged paradigms (PostgreSQL): perceptlab_paired_vote (server/paradigms/paired/vote.sql) and
-- perceptlab_rating_response (server/paradigms/rating/rating.sql).
--
-- The one home of the function's text. A migration installs it by reading this file
-- (server/migrations/versions/0019_shared_page_sql.py); a change here needs a new migration that
-- installs it again and pins the file's SHA-256 (tests/server/test_vote_rules.py fails until then).
--
-- The rules are those of the regular path: the page's reservation is renewed (a quiz page has none),
-- and the answer that leaves a page of trials without an open trial ends the page (mark_page_done and
-- end_page, server/paradigms/paged.py). The caller decides p_ends_page and has deferred the end of the
-- last page (the regular path completes the assignment). Returns the assignment's stage after it.
CREATE OR REPLACE FUNCTION perceptlab_page_answered(
    p_assignment_id integer, p_page_id integer, p_stage text, p_ends_page boolean,
    p_reserved_until timestamptz, p_now timestamptz)
RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE page SET reserved_until = p_reserved_until WHERE page.id = p_page_id AND page.reserved_until IS NOT NULL;
    IF NOT p_ends_page THEN
        RETURN p_stage;
    END IF;
    UPDATE page SET completed_at = p_now WHERE page.id = p_page_id;
    UPDATE assignment SET pages_completed = assignment.pages_completed + 1, stage = 'page_done'
        WHERE assignment.id = p_assignment_id;
    RETURN 'page_done';
END
$$;

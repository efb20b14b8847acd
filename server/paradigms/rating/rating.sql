-- perceptlab_rating_response: a rating in one round trip (PostgreSQL).
--
-- The one home of the function's text. Migrations install it by reading this file
-- (server/migrations/versions/0017_rating_sql.py, again 0019_shared_page_sql.py); a change
-- here needs a new migration that installs it again and pins the file's SHA-256
-- (tests/server/test_vote_rules.py fails until then).
--
-- The function locks the assignment row, checks the token's nonce and the study whose rules the
-- caller passed, and stores the common ratings with the rules of record_rating and _after_rating
-- (server/paradigms/rating/paradigm.py): a trial answered (real, training, hidden reference or gold
-- image alike, so that a quality check takes the same path as a real stimulus), its quality check's
-- result, the end of a page that is neither the last nor straight-lined. The caller has parsed the
-- body with parse_rating (the scale's rule, in Python only) and passes the known ranges of the two
-- kinds of quality check (server/paradigms/rating/quality.py, widened for the slider).
-- Outcomes: 'stored'; 'ended' (nothing changed) for a rating of an open trial of an assignment that
-- has ended, which the caller answers with the regular path's 409 assignment_ended; 'defer' (nothing
-- changed) for every case the regular path decides: a wrong or revoked nonce, another study, a stage
-- that takes no ratings, a worker turned away in another assignment of the study, a trial not open or
-- not the assignment's (a replay, a refusal), a rating ID stored already, the end of the training, a
-- hidden check that stops the worker, a straight-lined page, the last page.
-- tests/server/test_rating_response_rules.py runs each rule through this function and through the
-- regular path and compares the answers and the rows.
--
-- open_left counts the page's open trials after this rating. The hidden-check rule is judged with this
-- answer counted, before anything is written, so that a rating that would stop the worker changes
-- nothing. Straight-lining: a page whose answers (this one with them) are not all alike adds no
-- straight-lined page, and the worker's earlier pages did not reach the limit (the page that reached it
-- stopped the worker), so the function ends such a page itself and defers only an alike one.
CREATE OR REPLACE FUNCTION perceptlab_rating_response(
    p_assignment_id integer, p_nonce text, p_study_id integer, p_trial_id integer, p_client_rating_id text,
    p_raw_rating double precision, p_rt_ms double precision, p_method text,
    p_reference_low double precision, p_reference_high double precision,
    p_gold_low double precision, p_gold_high double precision,
    p_created_at timestamptz, p_reserved_until timestamptz, p_max_pages integer,
    p_accuracy_threshold double precision, p_gold_min_answered integer, p_straight_line_pages integer,
    p_straight_line_min_trials integer,
    OUT outcome text, OUT stage text, OUT open_left integer, OUT correct boolean)
LANGUAGE plpgsql AS $$
DECLARE
    a record;
    t record;
    stored_rating double precision;
    stored_response integer;
    gold_correct bigint;
    gold_answered bigint;
    page_answers bigint;
    page_low double precision;
    page_high double precision;
BEGIN
    outcome := 'defer';
    SELECT assignment.id, assignment.worker_id, assignment.study_id, assignment.stage, assignment.pages_completed,
           assignment.token_nonce,
           (SELECT worker.status FROM worker WHERE worker.id = assignment.worker_id) AS worker_status
        INTO a FROM assignment WHERE assignment.id = p_assignment_id FOR UPDATE;
    IF NOT FOUND OR a.token_nonce <> p_nonce OR a.study_id <> p_study_id THEN
        RETURN;
    END IF;
    -- After the end, a rating of an open trial of the assignment is refused (a replay is deferred).
    IF a.stage IN ('completed', 'stopped', 'disqualified', 'full') THEN
        IF EXISTS (SELECT 1 FROM rating_trial WHERE rating_trial.id = p_trial_id
                   AND rating_trial.assignment_id = a.id AND NOT rating_trial.answered) THEN
            outcome := 'ended';
            stage := a.stage;
        END IF;
        RETURN;
    END IF;
    -- A worker turned away in another assignment of the study is turned away here by the regular path.
    IF a.stage NOT IN ('quiz', 'trials', 'page_done') OR a.worker_status IN ('stopped', 'disqualified') THEN
        RETURN;
    END IF;
    SELECT rating_trial.id, rating_trial.page_id, rating_trial.stimulus_id, rating_trial.reference_first,
           rating_trial.is_gold, rating_trial.is_quiz, rating_stimulus.role
        INTO t FROM rating_trial JOIN rating_stimulus ON rating_stimulus.id = rating_trial.stimulus_id
        WHERE rating_trial.id = p_trial_id AND rating_trial.assignment_id = a.id AND NOT rating_trial.answered;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM rating_response
                            WHERE rating_response.client_rating_id = p_client_rating_id) THEN
        RETURN;
    END IF;
    open_left := (SELECT count(*) FROM rating_trial
                  WHERE rating_trial.page_id = t.page_id AND NOT rating_trial.answered) - 1;
    -- CCR asks about the second image against the first: its sign is turned when the reference was second.
    stored_rating := CASE WHEN p_method = 'ccr' AND NOT t.reference_first THEN -p_raw_rating ELSE p_raw_rating END;
    IF t.is_gold THEN
        correct := CASE WHEN t.role = 'hidden_reference' THEN stored_rating BETWEEN p_reference_low AND p_reference_high
                        ELSE stored_rating BETWEEN p_gold_low AND p_gold_high END;
    END IF;
    IF t.is_quiz THEN
        IF open_left = 0 AND a.stage = 'quiz' THEN
            RETURN;  -- the training is scored: passed or disqualified
        END IF;
    ELSE
        IF t.is_gold AND a.stage IN ('trials', 'page_done') THEN
            SELECT count(*) FILTER (WHERE rating_gold_result.correct), count(*) INTO gold_correct, gold_answered
                FROM rating_gold_result
                WHERE rating_gold_result.worker_id = a.worker_id AND NOT rating_gold_result.is_quiz;
            gold_answered := gold_answered + 1;
            gold_correct := gold_correct + CASE WHEN correct THEN 1 ELSE 0 END;
            IF gold_answered >= p_gold_min_answered
               AND gold_correct < p_accuracy_threshold * gold_answered - 1e-9 THEN
                RETURN;  -- the worker is stopped
            END IF;
        END IF;
        IF open_left = 0 AND a.stage = 'trials' THEN
            IF a.pages_completed + 1 >= p_max_pages THEN
                RETURN;  -- the last page: the assignment is completed
            END IF;
            IF p_straight_line_pages > 0 THEN
                SELECT count(*), min(rating_response.raw_rating), max(rating_response.raw_rating)
                    INTO page_answers, page_low, page_high
                    FROM rating_trial JOIN rating_response ON rating_response.trial_id = rating_trial.id
                    WHERE rating_trial.page_id = t.page_id AND NOT rating_trial.is_quiz;
                IF page_answers + 1 >= p_straight_line_min_trials
                   AND (page_answers = 0 OR (page_low = p_raw_rating AND page_high = p_raw_rating)) THEN
                    RETURN;  -- a straight-lined page: the regular path counts the worker's such pages
                END IF;
            END IF;
        END IF;
    END IF;
    UPDATE rating_trial SET answered = TRUE WHERE rating_trial.id = t.id;
    INSERT INTO rating_response (client_rating_id, trial_id, assignment_id, worker_id, study_id, stimulus_id,
                                 raw_rating, rating, rt_ms, created_at)
        VALUES (p_client_rating_id, t.id, a.id, a.worker_id, a.study_id, t.stimulus_id, p_raw_rating,
                stored_rating, p_rt_ms, p_created_at)
        RETURNING rating_response.id INTO stored_response;
    IF t.is_gold THEN
        INSERT INTO rating_gold_result (response_id, worker_id, assignment_id, is_quiz, correct)
            VALUES (stored_response, a.worker_id, a.id, t.is_quiz, correct);
    END IF;
    -- The reservation renewed, and the end of a page of trials (server/paradigms/paged.sql).
    stage := perceptlab_page_answered(a.id, t.page_id, a.stage, NOT t.is_quiz AND open_left = 0 AND a.stage = 'trials',
                                      p_reserved_until, p_created_at);
    IF NOT t.is_quiz THEN
        correct := NULL;  -- only training answers are told whether they were in range
    END IF;
    outcome := 'stored';
END
$$;

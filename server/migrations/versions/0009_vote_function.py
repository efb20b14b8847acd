"""PostgreSQL: a paired-comparison vote in one round trip (function perceptlab_paired_vote)

The function stores the common votes (a trial answered, a gold answer that stops nobody, the end
of a page that is not the last) in one statement, with the assignment row locked for its
duration. In every other case it returns outcome 'defer' and changes nothing: a wrong or revoked
token nonce, an assignment of another study than the one whose rules the caller passed, a stage
that takes no votes, a trial not open or not the assignment's, a vote ID stored already, the end
of the quiz, a hidden-gold answer that stops the worker, the last page. The caller
(server/paradigms/paired/paradigm.py, record_vote_in_one_statement) then takes the regular path
(record_vote), which decides those cases. The rules mirror record_vote's and _after_vote's;
tests/server run every vote test on both databases, and test_one_statement_vote.py checks that
both paths leave the same database behind.

SQLite has no stored functions: there every vote takes the regular path.

Revision ID: 0009_vote_function
Revises: 0008_held_pairs
Create Date: 2026-11-25 12:00:00
"""
from __future__ import annotations

from alembic import op


revision = '0009_vote_function'
down_revision = '0008_held_pairs'
branch_labels = None
depends_on = None

# open_left counts the page's open trials after this vote (the claimed one included in the count,
# hence "- 1": the count runs before the claim). The hidden-gold rule is judged with this answer
# counted, before anything is written, so that a vote that would stop the worker changes nothing.
VOTE_FUNCTION = """
CREATE OR REPLACE FUNCTION perceptlab_paired_vote(
    p_assignment_id integer, p_nonce text, p_study_id integer, p_trial_id integer, p_client_vote_id text,
    p_chose_left boolean, p_rt_ms double precision, p_input text, p_client_time text, p_window_width integer,
    p_window_height integer, p_device_pixel_ratio double precision, p_created_at timestamptz,
    p_reserved_until timestamptz, p_max_pages integer, p_accuracy_threshold double precision,
    p_gold_min_answered integer,
    OUT outcome text, OUT stage text, OUT open_left integer, OUT quiz_correct boolean)
LANGUAGE plpgsql AS $$
DECLARE
    a record;
    t record;
    correct boolean;
    stored_vote integer;
    gold_correct bigint;
    gold_answered bigint;
BEGIN
    outcome := 'defer';
    SELECT assignment.id, assignment.worker_id, assignment.study_id, assignment.stage, assignment.pages_completed,
           assignment.token_nonce
        INTO a FROM assignment WHERE assignment.id = p_assignment_id FOR UPDATE;
    IF NOT FOUND OR a.token_nonce <> p_nonce OR a.study_id <> p_study_id
       OR a.stage NOT IN ('quiz', 'trials', 'page_done') THEN
        RETURN;
    END IF;
    SELECT trial.id, trial.page_id, trial.pair_id, trial.is_gold, trial.is_quiz, pair.is_gold AS pair_is_gold,
           pair.gold_winner_id, page.held AS page_held,
           CASE WHEN trial.left_is_a = p_chose_left THEN pair.stimulus_a_id ELSE pair.stimulus_b_id END AS winner_id
        INTO t FROM trial JOIN pair ON pair.id = trial.pair_id JOIN page ON page.id = trial.page_id
        WHERE trial.id = p_trial_id AND trial.assignment_id = a.id AND NOT trial.answered;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM vote WHERE vote.client_vote_id = p_client_vote_id) THEN
        RETURN;
    END IF;
    open_left := (SELECT count(*) FROM trial WHERE trial.page_id = t.page_id AND NOT trial.answered) - 1;
    correct := COALESCE(t.winner_id = t.gold_winner_id, FALSE);
    IF t.is_quiz THEN
        IF open_left = 0 AND a.stage = 'quiz' THEN
            RETURN;  -- the quiz is scored: passed or disqualified
        END IF;
    ELSE
        IF t.is_gold AND a.stage IN ('trials', 'page_done') THEN
            SELECT count(*) FILTER (WHERE gold_result.correct), count(*) INTO gold_correct, gold_answered
                FROM gold_result WHERE gold_result.worker_id = a.worker_id AND NOT gold_result.is_quiz;
            gold_answered := gold_answered + 1;
            gold_correct := gold_correct + CASE WHEN correct THEN 1 ELSE 0 END;
            IF gold_answered >= p_gold_min_answered
               AND gold_correct < p_accuracy_threshold * gold_answered - 1e-9 THEN
                RETURN;  -- the worker is stopped
            END IF;
        END IF;
        IF open_left = 0 AND a.stage = 'trials' AND a.pages_completed + 1 >= p_max_pages THEN
            RETURN;  -- the last page: the assignment is completed
        END IF;
    END IF;
    UPDATE trial SET answered = TRUE WHERE trial.id = t.id;
    IF NOT t.pair_is_gold THEN
        UPDATE pair SET n_votes = pair.n_votes + 1, n_held = pair.n_held - CASE WHEN t.page_held THEN 1 ELSE 0 END
            WHERE pair.id = t.pair_id;
    END IF;
    INSERT INTO vote (client_vote_id, trial_id, assignment_id, worker_id, study_id, pair_id, winner_id, chose_left,
                      rt_ms, input, client_time, window_width, window_height, device_pixel_ratio, created_at)
        VALUES (p_client_vote_id, t.id, a.id, a.worker_id, a.study_id, t.pair_id, t.winner_id, p_chose_left,
                p_rt_ms, p_input, p_client_time, p_window_width, p_window_height, p_device_pixel_ratio,
                p_created_at)
        RETURNING vote.id INTO stored_vote;
    IF t.is_gold THEN
        INSERT INTO gold_result (vote_id, worker_id, assignment_id, is_quiz, correct)
            VALUES (stored_vote, a.worker_id, a.id, t.is_quiz, correct);
    END IF;
    UPDATE page SET reserved_until = p_reserved_until WHERE page.id = t.page_id AND page.reserved_until IS NOT NULL;
    stage := a.stage;
    IF NOT t.is_quiz AND open_left = 0 AND a.stage = 'trials' THEN
        UPDATE page SET completed_at = p_created_at WHERE page.id = t.page_id;
        UPDATE assignment SET pages_completed = assignment.pages_completed + 1, stage = 'page_done'
            WHERE assignment.id = a.id;
        stage := 'page_done';
    END IF;
    IF t.is_quiz THEN
        quiz_correct := correct;
    END IF;
    outcome := 'stored';
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute(VOTE_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('DROP FUNCTION IF EXISTS perceptlab_paired_vote')

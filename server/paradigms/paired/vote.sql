-- perceptlab_paired_vote: a paired-comparison vote in one round trip (PostgreSQL).
--
-- The one home of the function's text. Migrations install it by reading this file
-- (server/migrations/versions/0014_paired_vote_sql.py, again 0019_shared_page_sql.py); a change
-- here needs a new migration that installs it again and pins the file's SHA-256
-- (tests/server/test_vote_rules.py fails until then).
--
-- The function locks the assignment row, checks the token's nonce and the study whose rules the
-- caller passed, and stores the common votes (a trial answered, a gold answer that stops nobody, the
-- end of a page that is not the last) with the rules of record_vote and _after_vote
-- (server/paradigms/paired/paradigm.py). Outcomes: 'stored'; 'ended' (nothing changed) for a vote on
-- an open trial of an assignment that has ended (completed, stopped, disqualified, full), which the
-- caller answers with the regular path's 409 assignment_ended; 'defer' (nothing changed) for every
-- case the regular path decides: a wrong or revoked nonce, another study, a stage that takes no
-- votes, a worker turned away in another assignment of the study, a trial not open or not the
-- assignment's (a replay, a refusal), a vote ID stored already, the end of the quiz, a hidden-gold
-- answer that stops the worker, the last page. tests/server/test_vote_rules.py runs each rule
-- through this function and through the regular path and compares the answers and the rows.
--
-- open_left counts the page's open trials after this vote (the count runs before the claim, hence
-- "- 1"). The hidden-gold rule is judged with this answer counted, before anything is written, so that
-- a vote that would stop the worker changes nothing. The worker's status is read by a subquery:
-- FOR UPDATE locks the assignment row only.
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
           assignment.token_nonce, assignment.pilot,
           (SELECT worker.status FROM worker WHERE worker.id = assignment.worker_id) AS worker_status
        INTO a FROM assignment WHERE assignment.id = p_assignment_id FOR UPDATE;
    IF NOT FOUND OR a.token_nonce <> p_nonce OR a.study_id <> p_study_id THEN
        RETURN;
    END IF;
    -- After the end, a vote for an open trial of the assignment is refused (a replay is deferred).
    IF a.stage IN ('completed', 'stopped', 'disqualified', 'full') THEN
        IF EXISTS (SELECT 1 FROM trial WHERE trial.id = p_trial_id AND trial.assignment_id = a.id
                   AND NOT trial.answered) THEN
            outcome := 'ended';
            stage := a.stage;
        END IF;
        RETURN;
    END IF;
    -- A worker turned away in another assignment of the study is turned away here by the regular path.
    IF a.stage NOT IN ('quiz', 'trials', 'page_done') OR a.worker_status IN ('stopped', 'disqualified') THEN
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
    IF NOT t.pair_is_gold AND NOT a.pilot THEN  -- a pilot's vote fills no pair's target (server/pilot.py)
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
    -- The reservation renewed, and the end of a page of trials (server/paradigms/paged.sql).
    stage := perceptlab_page_answered(a.id, t.page_id, a.stage, NOT t.is_quiz AND open_left = 0 AND a.stage = 'trials',
                                      p_reserved_until, p_created_at);
    IF t.is_quiz THEN
        quiz_correct := correct;
    END IF;
    outcome := 'stored';
END
$$;

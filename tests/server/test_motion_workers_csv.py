"""workers.csv of a motion study (dashboard download and workers_meta.csv of `perceptlab export`): motion
columns (calibration, refresh, screening, trials, frame drops), not paired comparison's pages, votes and gold."""
from __future__ import annotations

import csv
import io

import pytest
from click.testing import CliRunner

from server import exports
from server.cli import cli
from server.paradigms.display_monitor import DISPLAY_COLUMNS
from server.paradigms.motion.export import MOTION_WORKERS_COLUMNS
from server.wages import WORKER_COLUMNS

from .motion_support import SECRET, MotionWorker, _finished_worker


def _rows(text: str) -> tuple[list[str], dict[str, dict]]:
    reader = csv.DictReader(io.StringIO(text))
    return list(reader.fieldnames or []), {r["worker_id"]: r for r in reader}


def test_motion_workers_csv_has_motion_columns(app, admin, motion_study, tmp_path, monkeypatch):
    _finished_worker(app, motion_study, "WDONE1", drops_on_first_main=2)
    slow = MotionWorker(app, motion_study, worker_id="WSLOW1")
    slow.start()
    slow.calibrate(interval_ms=1000 / 30)          # refused: a 30 Hz display
    MotionWorker(app, motion_study, worker_id="WNEW1").start()   # consented, not calibrated yet

    download = admin.get(f"/admin/studies/{motion_study}/workers.csv")
    assert download.status_code == 200 and download.mimetype == "text/csv"
    header, rows = _rows(download.get_data(as_text=True))
    # then every study's recruiter columns, time on task and pay (server/exports.py, server/wages.py)
    assert header == (list(MOTION_WORKERS_COLUMNS) + list(exports.RECRUITER_COLUMNS) + list(exports.FINGERPRINT_COLUMNS)
                      + list(exports.LOCALE_COLUMNS) + [exports.REASON_COLUMN] + list(DISPLAY_COLUMNS)
                      + list(WORKER_COLUMNS))
    assert not {"pages", "n_votes", "gold_correct", "gold_total", "gold_accuracy", "quiz"} & set(header)

    salt = exports.study_salt(SECRET, motion_study)
    done = rows[exports.pseudonym(salt, "WDONE1")]
    assert (done["sessions"], done["sessions_completed"], done["calibrations"]) == ("1", "1", "1")
    assert done["stage"] == "completed" and done["display_accepted"] == "1" and done["fullscreen"] == "1"
    assert float(done["refresh_hz"]) == pytest.approx(60, abs=0.1) and float(done["px_per_mm"]) > 0
    assert float(done["viewing_distance_cm"]) > 0 and done["measured_distance_cm"] == ""  # no blind-spot task
    assert done["screening_passed"] == "1" and float(done["screening_r"]) > 0.9
    # 2 clips x 3 probes x 2 repetitions, one of them with dropped frames
    assert (done["trials_done"], done["trials_with_drops"]) == ("12", "1")
    assert float(done["drop_rate"]) == pytest.approx(1 / 12)
    assert float(done["time_active_s"]) >= 0 and done["completion_status"]  # shared columns reach motion rows

    slow_row = rows[exports.pseudonym(salt, "WSLOW1")]
    assert slow_row["display_accepted"] == "0" and float(slow_row["refresh_hz"]) == pytest.approx(30, abs=0.1)
    assert (slow_row["trials_done"], slow_row["drop_rate"], slow_row["screening_passed"]) == ("0", "", "")
    new = rows[exports.pseudonym(salt, "WNEW1")]
    assert (new["calibrations"], new["px_per_mm"], new["refresh_hz"]) == ("0", "", "")

    raw_header, raw = _rows(admin.get(f"/admin/studies/{motion_study}/workers.csv?raw_worker_ids=1")
                            .get_data(as_text=True))
    assert raw_header == header and {"WDONE1", "WSLOW1", "WNEW1"} == set(raw)

    # `perceptlab export` writes the same table as workers_meta.csv.
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", SECRET)
    out = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export", motion_study, "--out", str(out), "--database-url",
                                      app.config["DATABASE_URL"]])
    assert result.exit_code == 0, result.output
    assert "workers_meta.csv" in result.output and "3 workers" in result.output
    assert (out / "workers_meta.csv").read_text() == download.get_data(as_text=True)

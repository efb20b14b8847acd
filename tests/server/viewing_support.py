"""A worker at the ``[viewing]`` checks over the worker pages' routes, for the server and browser tests."""
from __future__ import annotations

import math

from sqlalchemy import select

from server.models import Study, ViewingResult, Worker
from server.paradigms import viewing
from server.paradigms.core import spec_for
from server.paradigms.screen import BLIND_SPOT_DEG, CARD_HEIGHT_MM, CARD_WIDTH_MM
from server.services import app_services

from .conftest import WorkerClient

ALL_CHECKS = ["brightness", "colour", "distance", "acuity"]
PX_PER_MM = 4.0
CARD = {"card_width_px": CARD_WIDTH_MM * PX_PER_MM, "card_height_px": CARD_HEIGHT_MM * PX_PER_MM}


def _sweeps(distance_cm: float, n: int = 5) -> list[float]:
    """Blind-spot sweeps (px) that give ``distance_cm`` on a screen of PX_PER_MM."""
    return [round(math.tan(math.radians(BLIND_SPOT_DEG)) * distance_cm * 10 * PX_PER_MM, 1)] * n


class Viewer:
    """A worker at the viewing checks, over the worker pages' routes."""

    def __init__(self, app, client, slug):
        self.app, self.client = app, client
        self.api = WorkerClient(client, slug)
        self.base = f"/w/{self.api.token}/viewing"

    def truth(self, check: str) -> list:
        with app_services(self.app).sessions() as session:
            study = session.scalar(select(Study).join(Worker).where(Worker.external_id == self.api.worker_id))
            worker_id = session.scalar(select(Worker.id).where(Worker.external_id == self.api.worker_id))
            spec = spec_for(session, study.id)
            return viewing.expected(self.app.config["SECRET_KEY"], study, worker_id, check, spec)

    def answer(self, check: str, answers):
        return self.client.post(f"{self.base}/answers/{check}", json={"answers": answers})

    def screen(self, distance_cm: float | None = 60.0, dpr: float = 1.0):
        body = {**CARD, "device_pixel_ratio": dpr, "refresh_intervals_ms": [16.7] * 3, "fullscreen": False}
        if distance_cm is not None:
            body["blind_spot_px"] = _sweeps(distance_cm)
        return self.client.post(f"{self.base}/screen", json=body)

    def image(self, check: str, index: int) -> bytes:
        response = self.client.get(f"{self.base}/image/{check}/{index}")
        assert response.status_code == 200 and response.mimetype == "image/png"
        return response.data

    def pass_all(self):
        assert self.answer("brightness", self.truth("brightness")).json == {"passed": True,
                                                                           "pending": ["colour", "distance", "acuity"]}
        assert self.answer("colour", self.truth("colour")).json["passed"]
        assert self.screen().json == {"accepted": True}
        assert self.answer("acuity", self.truth("acuity")).json == {"passed": True, "pending": []}

    def results(self) -> dict[str, ViewingResult]:
        with app_services(self.app).sessions() as session:
            rows = session.scalars(select(ViewingResult).join(Worker, Worker.id == ViewingResult.worker_id)
                                   .where(Worker.external_id == self.api.worker_id)).all()
            session.expunge_all()
            return {r.check: r for r in rows}

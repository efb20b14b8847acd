"""The ``[viewing]`` checks taken by a simulated worker of ``perceptlab simulate`` (:mod:`server.simulate_client`),
whatever the study's paradigm, through the routes the browser's checks page uses (server/views/viewing.py):
each check's images, ``POST .../screen`` (the card and the blind-spot sweeps) and ``POST .../answers/<check>``.

What a worker must answer is drawn by the server from a seed keyed with its secret (server/paradigms/viewing.py).
``perceptlab simulate`` holds that secret (it signs its workers as simulated with it), and the entry of a simulated
participant names the draw's identifiers, so a careful simulated worker computes the answers with the server's own
:func:`~server.paradigms.viewing.drawn_answers`: it sees what a careful person with a good screen would see. A
careless one answers at random, and so mostly fails, as the server turns away a careless person.

The simulated screen: 1366 x 768 CSS px at 3.78 CSS px per mm (96 dpi), devicePixelRatio 1. A careful worker sits
at the study's ``distance_cm`` give or take a few per cent (:data:`CAREFUL_DISTANCE_SD`); a careless one anywhere
from 30 to 150 cm.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .paradigms.screen import BLIND_SPOT_DEG, CARD_HEIGHT_MM, CARD_WIDTH_MM
from .paradigms.viewing import drawn_answers

if TYPE_CHECKING:
    from .simulate_client import WorkerDriver

PX_PER_MM = 96 / 25.4          # the simulated screen: 96 CSS px per inch
SWEEPS = 5                      # blind-spot sweeps, as blind_spot.js makes
CAREFUL_DISTANCE_SD = 0.05      # a careful worker's distance: distance_cm x exp(N(0, 0.05)), well in the 25 % tolerance
SWEEP_SD = 0.03                 # each sweep's scatter around the worker's true blind-spot position
CARELESS_DISTANCE_CM = (30.0, 150.0)
IMAGE_COUNTS = {"brightness": lambda config: 2, "colour": lambda config: int(config["colour_plates"]),
                "acuity": lambda config: int(config["acuity_trials"])}


def _careless_answers(check: str, config: dict[str, Any], rng) -> list[Any]:
    """Answers at random: any count, any digit (or none), any gap direction."""
    if check == "brightness":
        return [int(n) for n in rng.integers(0, int(config["max_shapes"]) + 1, size=2)]
    if check == "colour":
        return [None if d == 10 else int(d) for d in rng.integers(2, 11, size=int(config["colour_plates"]))]
    directions = config["gap_directions"]
    return [directions[int(i)] for i in rng.integers(len(directions), size=int(config["acuity_trials"]))]


def screen_body(config: dict[str, Any], careful: bool, rng) -> dict[str, Any]:
    """``POST .../screen``'s body (calibration.js's): the card matched on the simulated screen and, with the
    distance check, the blind-spot sweeps of a worker at a careful or a careless distance."""
    body: dict[str, Any] = {"card_width_px": round(CARD_WIDTH_MM * PX_PER_MM, 1),
                            "card_height_px": round(CARD_HEIGHT_MM * PX_PER_MM, 1), "device_pixel_ratio": 1}
    if "distance" in config["checks"]:
        wanted = float(config["distance_cm"])
        distance = (wanted * math.exp(rng.normal(0, CAREFUL_DISTANCE_SD)) if careful
                    else float(rng.uniform(*CARELESS_DISTANCE_CM)))
        spot_px = math.tan(math.radians(BLIND_SPOT_DEG)) * distance * 10 * PX_PER_MM
        body["blind_spot_px"] = [round(spot_px * (1 + rng.normal(0, SWEEP_SD)), 1) for _ in range(SWEEPS)]
    return body


async def take_checks(driver: WorkerDriver, fields: dict[str, Any], secret: str | None) -> bool:
    """Take the study's checks as ``driver``'s worker (careful when it is honest and ``secret`` is known: a
    simulation without the secret, or of a server that gave no ``draw``, answers at random). True when every
    check passed; False when one failed (the server turned the worker away) or a request was refused."""
    config = fields["config"]
    careful = driver.honest and secret is not None and "draw" in fields
    report, rng = driver.sim.report, driver.rng
    base = config["base"]
    screened = False
    for check in config["checks"]:
        if check in ("distance", "acuity") and not screened:
            status, reply = await driver.api("viewing", "POST", f"{base}/screen", screen_body(config, careful, rng))
            screened = True
            if status != 200 or not isinstance(reply, dict):
                return False
            if check == "distance":
                report.viewing[f"distance:{'passed' if reply.get('accepted') else 'failed'}"] += 1
                if not reply.get("accepted"):
                    return False
                continue
        for index in range(IMAGE_COUNTS[check](config)):  # the images a browser shows (a worker looks at them)
            await driver.sim.fetch(f"{base}/image/{check}/{index}", kind="viewing_image", token=driver.token)
        answers = (drawn_answers(secret, fields, check) if careful  # type: ignore[arg-type]
                   else _careless_answers(check, config, rng))
        status, reply = await driver.api("viewing", "POST", f"{base}/answers/{check}", {"answers": answers})
        if status != 200 or not isinstance(reply, dict):
            return False
        report.viewing[f"{check}:{'passed' if reply.get('passed') else 'failed'}"] += 1
        if not reply.get("passed"):
            return False
    return True

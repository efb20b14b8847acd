"""What the CLI says about time on task and pay (server/worker_time.py, server/wages.py): the settings
from ``[server]``, and the line `study create` and `mturk launch` print about time and wage."""
from __future__ import annotations

from .base import UserError, cli_config


def cli_pay_settings():
    """How time on task is measured and pay judged (``[server]`` idle_cap_seconds, lead_in_cap_seconds,
    wage_floor_usd_per_hour, estimate_min_finished): :class:`server.worker_time.PaySettings`."""
    from server.worker_time import PaySettings

    try:
        return PaySettings.from_config(cli_config().get("server"))
    except ValueError as exc:
        raise UserError(f"configuration: {exc}") from None


def time_and_wage(session, study) -> tuple[str, str | None]:
    """``(line, warning)``: how long the HIT's work takes (the estimate workers are shown) and the wage its
    reward pays at that; the warning (else None) when that is below ``[server] wage_floor_usd_per_hour``."""
    from server.payments import pay_unit
    from server.wages import hourly
    from server.worker_time import time_estimate

    settings = cli_pay_settings()
    pay, estimate = pay_unit(study), time_estimate(session, study, settings)
    wage = hourly(pay.hit_reward, estimate.hit_seconds(pay.required))
    line = (f"time: {estimate.phrase} ({estimate.basis}); the reward of ${pay.hit_reward} for "
            f"{pay.required} {pay.name}(s) pays about ${wage:.2f}/h")
    floor = settings.wage_floor_usd_per_h
    warning = (f"warning: ${wage:.2f}/h is below the wage floor of ${floor:.2f}/h ([server] wage_floor_usd_per_hour)"
               if floor and wage < floor else None)
    return line, warning

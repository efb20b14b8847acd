"""The media layer's server half, shared by every paradigm: what a study shows (images or videos),
the ``[media]`` parameters, the playback log a video trial's response carries, and the rule that
says whether a playback was faithful.

A paradigm holds no media code: it stores :func:`study_media` in its study's config when it creates
the study, sends :func:`state_media` in its State and each stimulus's :func:`stimulus_fields`, takes
the ``playback`` member of a response through :func:`parse_playback` and exports
:data:`PLAYBACK_COLUMNS` with :func:`playback_columns` (and, for clips played together side by side, the
drift between them: :data:`DRIFT_COLUMN`, :func:`drift_column`). The browser half is
``experiment_ui/static/js/media.js`` (preload, decoding check, playback and its log).

**The playback rule** (ITU-T P.910's crowd toolkit, microsoft/P.910 ``master.cfg``): a playback is
faithful when the clip stalled for at most ``max_stall_ms`` in total (500 ms: a stall a viewer
notices, and one that changes a quality judgement, P.910 Annex on rebuffering) and its playback took
at most ``max_extra_playing_ms`` longer than the clip (2500 ms: the toolkit's
``max_accepted_extra_playing_time_sec``), and at most ``max_dropped_share`` of its frames were
dropped (5 %). An unfaithful playback is played again (``unfaithful = "repeat"``, up to
``max_repeats`` times, by the browser) and, if still unfaithful, stored with ``playback_faithful``
false; ``unfaithful = "exclude"`` leaves such ratings out of the exported responses (the database
keeps them).

**The connection check** (before consent): the entry page downloads :data:`PROBE_BYTES` of random bytes
(``/media/connection-probe``: no stimulus, nothing about the study) and refuses a worker whose connection
is slower than ``min_mbps``. Its default (0) is the study's highest clip bit rate (:func:`needed_mbps`):
at that speed the whole-file preload of a trial takes no longer than its clips play, so a worker never
waits longer for a trial than it lasts. A refused worker is told why at once and turned away in the study
with that reason (:func:`slow_connection_reason`), as a failed quiz is: otherwise retrying until one
lucky estimate would pass.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from stimuli.media import IMAGE, VIDEO, MediaError, manifest_media, probe

from .params import param
from .studyfile import StudyDefinitionError

#: The playback log's fields as ratings.csv (and votes.csv) export them, in this order.
_COUNTS = ("stall_ms", "dropped_frames", "presented_frames", "start_delay_ms", "replays")
PLAYBACK_COLUMNS = (*_COUNTS, "playback_faithful", "playback_error")
#: What the browser sends: the exported counts, and the clips' total duration and wall time of playback.
_LOG_NUMBERS = {"stall_ms": 3_600_000, "dropped_frames": 10_000_000, "presented_frames": 10_000_000,
                "start_delay_ms": 3_600_000, "replays": 1000, "playing_ms": 3_600_000}
#: Optional numbers of a log: the clips' total duration, and, when clips play together side by side
#: (media.js playTogether), the largest offset between their pictures during playback (ms).
_OPTIONAL_NUMBERS = {"duration_ms": 3_600_000, "max_drift_ms": 3_600_000}
_LOG_KEYS = (*_LOG_NUMBERS, *_OPTIONAL_NUMBERS, "error")
#: The export's column of the drift between clips played together (empty for clips played alone).
DRIFT_COLUMN = "max_drift_ms"
#: Why a clip could not be shown, as the browser names it (media.js MediaFailure.cause).
FAILURE_CAUSES = ("http", "decode", "timeout", "network", "autoplay")
#: Per stimulus fields of ``study show --json``'s ``media``.
STIMULUS_FIELDS = ("duration_s", "fps", "width", "height", "codec")
UNFAITHFUL = ("repeat", "exclude")


@dataclass(frozen=True, kw_only=True)
class MediaParams:
    """The ``[media]`` table: how video clips are played and when a playback counts (images ignore it)."""
    SECTION_DOCS: ClassVar[dict[str, str]] = {
        "media": "Video clips: played once without controls after a whole-file preload; the replays a worker may "
                 "ask for; the rule that decides whether a playback was faithful (P.910 crowd toolkit defaults, "
                 "server/paradigms/media.py). Image studies ignore it."}
    replays: int = param(0, section="media", low=0, high=10,
                         doc="times a worker may play a clip again (a button), besides the first playback")
    max_stall_ms: float = param(500.0, section="media", low=0,
                                doc="a playback whose stalls (waiting for data or decoding) add up to more is unfaithful")
    max_extra_playing_ms: float = param(2500.0, section="media", low=0,
                                        doc="a playback that took longer than the clip by more is unfaithful (P.910 "
                                            "crowd toolkit: 2.5 s)")
    max_dropped_share: float = param(0.05, section="media", low=0, high=1,
                                     doc="a playback that dropped more than this share of the clip's frames is "
                                         "unfaithful")
    unfaithful: str = param("repeat", section="media", choices=UNFAITHFUL,
                            doc='"repeat": the clip is played again (up to max_repeats) before the rating; '
                                '"exclude": unfaithful ratings are left out of the export')
    max_repeats: int = param(2, section="media", low=0, high=5,
                             doc="repeat: the playbacks after an unfaithful one, at most")
    min_mbps: float = param(0.0, section="media", low=0, high=10_000,
                            doc="video studies: the connection speed (Mbit/s) a worker needs, measured before "
                                "consent on a test file; 0 = the study's highest clip bit rate (a trial then "
                                "preloads no slower than it plays)")

    def media_rule(self) -> dict[str, Any]:
        """The rule as the State sends it to the browser (which repeats unfaithful playbacks)."""
        return {"max_stall_ms": self.max_stall_ms, "max_extra_playing_ms": self.max_extra_playing_ms,
                "max_dropped_share": self.max_dropped_share, "unfaithful": self.unfaithful,
                "max_repeats": self.max_repeats if self.unfaithful == "repeat" else 0}


def faithful(log: dict[str, Any] | None, spec: MediaParams) -> bool | None:
    """Whether a playback ``log`` (:func:`parse_playback`) passes the spec's rule; None without a log
    (an image trial). A log's ``error`` names a failure met before this playback (a load retried): the
    playback itself is judged by its counts."""
    if log is None:
        return None
    frames = log["presented_frames"] + log["dropped_frames"]
    dropped_share = log["dropped_frames"] / frames if frames else 1.0
    # The extra playing time is counted per playback: replays asked for by the worker are not lateness.
    extra = log["playing_ms"] / (1 + log["replays"]) - log.get("duration_ms", 0.0)
    return (log["stall_ms"] <= spec.max_stall_ms and dropped_share <= spec.max_dropped_share
            and extra <= spec.max_extra_playing_ms and log["presented_frames"] > 0)


def parse_playback(value: Any, fail) -> dict[str, Any] | None:
    """The ``playback`` member of a response body, checked: None when absent; ``fail(message)`` raises.

    ``{"stall_ms", "dropped_frames", "presented_frames", "start_delay_ms", "replays", "playing_ms",
    "duration_ms"?, "max_drift_ms"?, "error"?}``: milliseconds and frame counts, non-negative; ``error`` one of
    :data:`FAILURE_CAUSES` followed by ``": "`` and the browser's words. ``max_drift_ms`` only for clips
    played together (it is absent, not 0, otherwise).
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        fail("playback must be an object (the clip's playback log)")
    unknown = sorted(set(value) - set(_LOG_KEYS))
    if unknown:
        fail(f"playback: unknown members {', '.join(unknown)}")
    log: dict[str, Any] = {}
    for key, high in {**_LOG_NUMBERS, **_OPTIONAL_NUMBERS}.items():
        if key == DRIFT_COLUMN and key not in value:
            continue
        number = value.get(key, 0 if key in _OPTIONAL_NUMBERS else None)
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) \
                or not 0 <= number <= high:
            fail(f"playback.{key} must be a number in [0, {high}]")
        log[key] = float(number)
    error = value.get("error")
    if error is not None:
        if not isinstance(error, str) or len(error) > 300 or error.split(":")[0] not in FAILURE_CAUSES:
            fail(f"playback.error must name its cause first ({', '.join(FAILURE_CAUSES)}), at most 300 characters")
        log["error"] = error
    return log


def playback_columns(log: dict[str, Any] | None, spec: MediaParams) -> dict[str, Any]:
    """The export's :data:`PLAYBACK_COLUMNS` of one response (empty strings for image trials)."""
    if log is None:
        return {name: "" for name in PLAYBACK_COLUMNS}
    row: dict[str, Any] = {name: int(round(log[name])) for name in _COUNTS}
    row["playback_faithful"] = "1" if faithful(log, spec) else "0"
    row["playback_error"] = log.get("error", "")
    return row


#: Size of the connection check's download (random bytes, so that no compression helps): 2 MB, a fifth of a
#: 10 s clip at 8 Mbit/s, which a connection at the minimum fetches in about the time that share would play.
PROBE_BYTES = 2_000_000


def needed_mbps(media: dict, spec: MediaParams) -> float:
    """The connection speed (Mbit/s) a worker needs before consent: ``[media] min_mbps`` when set, else the
    highest bit rate of the study's clips (stored by :func:`study_media`), 0 for images (no check)."""
    if media.get("kind") != VIDEO:
        return 0.0
    return float(spec.min_mbps) if spec.min_mbps > 0 else float(media.get("max_mbps", 0.0))


def slow_connection_reason(measured_mbps: float | None, needed: float) -> tuple[str, dict[str, str]]:
    """Why a worker refused by the connection check is turned away: a reason code of server/reasons.py and its
    message's arguments, the cause and the numbers (``measured_mbps`` None: the test file did not arrive in
    the time the minimum allows)."""
    if measured_mbps is None or measured_mbps >= needed:
        return "connection_timeout", {"needed": f"{needed:.1f}"}
    return "slow_connection", {"measured": f"{measured_mbps:.1f}", "needed": f"{needed:.1f}"}


def drift_column(log: dict[str, Any] | None) -> dict[str, Any]:
    """The export's :data:`DRIFT_COLUMN` of one response: the drift between clips played together, rounded
    to 0.1 ms; empty for images and clips played alone."""
    drift = None if log is None else log.get(DRIFT_COLUMN)
    return {DRIFT_COLUMN: "" if drift is None else round(float(drift), 1)}


def study_media(scenes: list[tuple[Path, dict]], root: Path, extra: dict[str, Path] | None = None) -> dict:
    """What a study shows, for its config: ``{"kind", "entry_decoding_check", "codecs", "stimuli"}``.

    ``stimuli`` maps each file's path relative to ``root`` to its :data:`STIMULUS_FIELDS` (from the
    manifests, without opening a file); ``extra`` (path -> file, such as check clips written at
    creation) are probed. An image study records its kind only: images keep their own columns. ``max_mbps``
    is the highest bit rate of the clips (bytes over duration), the connection check's default minimum.

    Raises
    ------
    StudyDefinitionError
        Scenes of both kinds, or an extra file that cannot be probed.
    """
    kinds = {manifest_media(manifest)["kind"] for _, manifest in scenes}
    if len(kinds) > 1:
        raise StudyDefinitionError("the manifests name image scenes and video scenes; a study shows one or the other")
    kind = kinds.pop() if kinds else IMAGE
    if kind != VIDEO:
        return {"kind": kind}
    stimuli: dict[str, dict] = {}
    codecs = set()
    rates = [0.0]
    for folder, manifest in scenes:
        described = manifest_media(manifest)["stimuli"]
        files = {"reference": manifest["reference"]["path"], **{c["id"]: c["original"] for c in manifest["candidates"]}}
        for name, relative in files.items():
            fields = described[name]
            stimuli[(folder.resolve() / relative).relative_to(root).as_posix()] = _fields(fields)
            codecs.add(fields.get("codec"))
            rates.append(_mbps(fields))
    for relative, path in (extra or {}).items():
        try:
            fields = probe(path).to_dict()
        except MediaError as exc:
            raise StudyDefinitionError(str(exc)) from None
        stimuli[relative] = _fields(fields)
        codecs.add(stimuli[relative]["codec"])
        rates.append(_mbps(fields))
    check = any(m.get("parameters", {}).get("keep_encoding") for _, m in scenes)
    return {"kind": VIDEO, "entry_decoding_check": bool(check), "codecs": sorted(c for c in codecs if c),
            "stimuli": stimuli, "max_mbps": round(max(rates), 3)}


def _mbps(fields: dict) -> float:
    """A clip's average bit rate in Mbit/s (0 when its bytes or duration are unknown)."""
    seconds, size = fields.get("duration_s") or 0, fields.get("bytes") or 0
    return size * 8 / seconds / 1e6 if seconds > 0 else 0.0


# FFmpeg's codec names -> the RFC 6381 codec string of an MP4 file with that stream, at a level that covers
# 1080p: what canPlayType and MediaCapabilities are asked before consent.
CODEC_MIME = {"h264": 'video/mp4; codecs="avc1.640028"', "vp9": 'video/mp4; codecs="vp09.00.40.08"',
              "av1": 'video/mp4; codecs="av01.0.08M.08"', "hevc": 'video/mp4; codecs="hvc1.1.6.L120.90"',
              "mpeg4": 'video/mp4; codecs="mp4v.20.9"', "vp8": 'video/webm; codecs="vp8"'}


def _decode_type(codec: str) -> str:
    return CODEC_MIME.get(codec, f'video/mp4; codecs="{codec}"')


def decode_types(media: dict) -> tuple[str, ...]:
    """The MIME types a worker's browser must decode to take part (none for images): one per codec of the
    study's clips; a codec without a known codec string is asked as its bare name, which no browser claims."""
    if media.get("kind") != VIDEO:
        return ()
    return tuple(_decode_type(codec) for codec in media["codecs"])


def cannot_decode_reason(media: dict, types: Sequence[str]) -> tuple[str, dict[str, str]]:
    """Why a worker refused by the decoding check is turned away (a reason code and its arguments): each codec
    of the study's clips whose MIME type (one of :func:`decode_types`) their browser said it cannot decode."""
    named = [f"{codec.upper()} ({_decode_type(codec)})" for codec in media["codecs"] if _decode_type(codec) in types]
    return "cannot_decode", {"codecs": " or ".join(named)}


def _fields(info: dict) -> dict:
    return {key: info.get(key) for key in STIMULUS_FIELDS}


def media_of(config: dict[str, Any]) -> dict:
    """A stored study's media (:func:`study_media`); studies made before the media layer show images."""
    return config.get("media") or {"kind": IMAGE}


def stimulus_fields(media: dict, path: str) -> dict[str, Any]:
    """What a trial's State says of one stimulus file beyond its URL: ``{"kind": "video", "duration_s", "fps"}``
    for a video (the browser checks its playback against it), ``{}`` for an image."""
    if media.get("kind") != VIDEO:
        return {}
    fields = media["stimuli"].get(path, {})
    return {"kind": VIDEO, "duration_s": fields.get("duration_s"), "fps": fields.get("fps")}


def state_media(media: dict, spec: MediaParams) -> dict[str, Any]:
    """The State's members for the media: ``{"media": ...}`` for videos (the codecs, the replays a worker may
    ask for and the playback rule), nothing for images (their States stay as they were)."""
    if media.get("kind") != VIDEO:
        return {}
    return {"media": {"kind": VIDEO, "codecs": media["codecs"], "decoding_check": media["entry_decoding_check"],
                      "replays": spec.replays, "rule": spec.media_rule()}}


def stimulus_word(media: dict) -> str:
    """What the worker pages call the study's stimuli: "video" for clips, else "image" (the server's twin of
    media.js ``stimulusWords``)."""
    return "video" if media.get("kind") == VIDEO else "image"


def show_media(config: dict[str, Any]) -> dict[str, Any]:
    """``study show --json``'s ``media``: ``kind`` and, for videos, per stimulus file :data:`STIMULUS_FIELDS`."""
    media = media_of(config)
    if media.get("kind") != VIDEO:
        return {"kind": media.get("kind", IMAGE)}
    return {"kind": VIDEO, "codecs": media["codecs"], "entry_decoding_check": media["entry_decoding_check"],
            "stimuli": media["stimuli"]}


def write_check_clips(folder: Path, manifest: dict, target: Path, *, seed: int,
                      n_degraded: int) -> tuple[Path, list[Path]]:
    """A video scene's hidden reference and ``n_degraded`` strongly degraded clips (washed out and blurred),
    written under ``target`` through the delivery encoder path (:func:`stimuli.video.write_check_clip`), each
    sized like a candidate drawn at random (seeded by ``seed`` and the scene): neither metadata, size nor
    bitrate tells them from real clips. Named by their content: never new bytes under a name a study serves.

    Returns
    -------
    tuple
        The hidden reference's path, then the degraded clips' paths.

    Raises
    ------
    StudyDefinitionError
        A clip cannot be written (an unwritable stimulus folder, an unreadable reference).
    """
    from stimuli.video import washed_out_blur, write_check_clip

    scene = manifest["scene_id"]
    parameters = manifest.get("parameters") or {}
    reference = folder / manifest["reference"]["path"]
    stems = ["hidden_reference", *(f"original/gold_low_{k}" for k in range(1, n_degraded + 1))]
    rng = np.random.default_rng([seed, *scene.encode("utf-8")])
    written = []
    try:
        sizes = [(folder / c["original"]).stat().st_size for c in manifest["candidates"]]
        (target / "original").mkdir(parents=True, exist_ok=True)
        for k, stem in enumerate(stems):
            scratch = (target / stem).with_name(f".{Path(stem).name}.new.mp4")
            write_check_clip(reference, scratch, crf=float(parameters.get("crf", 12)),
                             preset=str(parameters.get("preset", "medium")),
                             degrade=None if k == 0 else washed_out_blur, target_bytes=int(rng.choice(sizes)))
            data = scratch.read_bytes()
            path = target / f"{stem}-{hashlib.sha256(data).hexdigest()[:16]}.mp4"
            if path.is_file() and path.read_bytes() == data:
                scratch.unlink()
            else:
                scratch.replace(path)
            written.append(path)
    except (MediaError, OSError) as exc:
        raise StudyDefinitionError(f"scene {scene!r}: the quality checks' clips cannot be written ({exc}); the "
                                   "stimulus folder must be writable when the study is created") from None
    return written[0], written[1:]

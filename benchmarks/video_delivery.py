"""Benchmark: 50 workers preloading 10 MB clips at once, behind the nginx recipe, three ways in one run.

* **(a) app + X-Accel-Redirect**: the worker's URL (``/stimuli/<slug>/<opaque>.mp4``) reaches gunicorn,
  which authorises the name and answers ``X-Accel-Redirect``; nginx streams the file (``[storage]
  accel_redirect``, the recipe's ``internal`` location);
* **(b) nginx directly**: the same files from a plain nginx ``alias`` location added for the benchmark (no
  app, no authorisation): the ceiling;
* **(c) the app itself**: the same URLs with the option off; gunicorn reads each clip and nginx proxies it
  (the recipe's ``proxy_buffering on``), for comparison.

The study is a video DCR study (one content, a reference and three processed clips, prepared by
``stimuli prepare``); after it is created its four delivered clips are overwritten with a 10 MB H.264 MP4
(640x360, 10 s, seeded noise at 8 Mbit/s), since delivery reads bytes, not frames. Each worker is one
``curl`` process (one TLS connection to nginx, HTTP/2 as a browser would get) that preloads its trial's
two clips whole, one after the other, as ``media.js``'s ``preloadClip`` does; all 50 start together. Rounds
alternate (a) and (b) (and (c) from a second stack with the option off) and each figure is the median over
rounds of the total bytes over the wall time from the first start to the last finish. The ratio (a)/(b)
is the price of asking the app (goal >= 0.8). Set-up as in production but on loopback: gunicorn gthread
4x2 on PostgreSQL, nginx with one worker process, TLS with a certificate made for the run::

    .venv/bin/python benchmarks/video_delivery.py                 # 50 workers, 2 clips each, 3 rounds
    .venv/bin/python benchmarks/video_delivery.py --workers 100 --rounds 5

Measured on the shared 2-core machine (7 agents' tests and benchmarks beside it: load average 10.9 just
before the run, 16-18 while measuring, the 50 clients, nginx and gunicorn included), 7 Dec 2026,
``.venv/bin/python benchmarks/video_delivery.py`` (50 workers x 2 clips of 10.4 MB, 3 rounds)::

    way                                                   MB/s  median worker preload s  vs (b)
    (a) app authorises, nginx streams (X-Accel-Redirect)   319                     2.95    1.11
    (b) nginx serves the files directly                    287                     3.39    1.00
    (c) the app sends the files itself (through nginx)     163                     4.34    0.57
    ratio (a)/(b) = 1.11 (goal >= 0.8)

An earlier run (load 20-22) gave 279, 288 and 197 MB/s: ratio 0.97. (a) and (b) are within the machine's
noise of each other; above 1 is that noise, not (a) being faster.

Asking the app costs one small proxied request per clip; the bytes are nginx's either way. Sent by the
app, each clip is read whole into a gunicorn thread and copied through nginx's proxy buffers: 0.57-0.68
of nginx alone, and all 8 gunicorn threads busy while 50 workers preload.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.slow_clients import ACCEL_LOCATION, NGINX, HonestWorker, Stack  # noqa: E402

DIRECT_LOCATION = "/_bench_direct/"  # the benchmark's own plain location: nginx serving the files, no app
STUDY = """[study]
kind = "rating"
slug = "{slug}"
name = "Video delivery"
manifests = ["{manifest}"]
[pages]
ratings_per_page = 4
min_pages = 1
max_pages = 2
[rating]
method = "dcr"
[quality]
quiz_size = 0
gold_rate = 0.0
[texts]
researcher = "the video delivery benchmark"
contact = "bench@perceptlab.invalid"
"""


def clip_bytes(path: Path, megabytes: float, seconds: int = 10, seed: int = 36) -> Path:
    """A real H.264 MP4 of about ``megabytes`` MB: 640x360 seeded noise for ``seconds`` s at the matching
    average bit rate (libx264 ultrafast, 25 fps)."""
    import numpy as np

    from tests.server.video_support import FPS, write_clip

    rng = np.random.default_rng(seed)
    images = list(rng.integers(0, 256, (seconds * FPS, 360, 640, 3), dtype=np.uint8))
    rate = f"{int(megabytes * 8e3 / seconds)}k"
    return write_clip(path, images, "libx264", {"preset": "ultrafast", "b": rate, "maxrate": rate, "bufsize": rate})


def video_study(folder: Path) -> Path:
    """One content of three processed clips, prepared for delivery: the manifest."""
    from tests.server.video_support import prepare_videos, video_scenes

    video_scenes(folder / "scenes", contents=1)
    return prepare_videos(folder / "scenes", folder / "stimuli" / "clips")


def trial_urls(stack: Stack) -> list[str]:
    """The (reference, test) clip URLs of every trial of a worker's first page, in order."""
    worker = HonestWorker(stack.nginx_url, stack.slug, verify=str(stack.cert))
    return [clip["url"] for trial in worker.state["page"]["trials"] for clip in trial["images"]]


def swap_in_big_clips(root: Path, clip: Path) -> list[Path]:
    """Every delivered clip under ``root`` becomes a copy of ``clip``; the clips."""
    clips = sorted(p for p in root.rglob("*.mp4") if "scenes" not in p.parts)
    for path in clips:
        shutil.copyfile(clip, path)
    return clips


def preload(base: str, cert: Path, urls_per_worker: list[list[str]]) -> tuple[float, int, list[float]]:
    """Every worker (a curl process) fetches its URLs whole over one connection, all started at once.

    Returns the wall time from the first start to the last finish, the bytes received, and each worker's
    time."""
    gate = threading.Barrier(len(urls_per_worker) + 1)
    results: list[tuple[int, float]] = [(0, 0.0)] * len(urls_per_worker)

    def worker(k: int, urls: list[str]) -> None:
        command = ["curl", "--silent", "--show-error", "--fail", "--cacert", str(cert), "--noproxy", "*",
                   "--write-out", "%{size_download}\\n"]
        for url in urls:
            command += [base + url, "--output", "/dev/null"]
        gate.wait()
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"curl failed ({done.returncode}): {done.stderr.strip()}")
        results[k] = (sum(int(n) for n in done.stdout.split()), elapsed)

    threads = [threading.Thread(target=worker, args=(k, urls)) for k, urls in enumerate(urls_per_worker)]
    for thread in threads:
        thread.start()
    gate.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return wall, sum(n for n, _ in results), [t for _, t in results]


def assignments(urls: list[str], workers: int, clips: int) -> list[list[str]]:
    """Worker ``k`` preloads ``clips`` consecutive clips of the page, starting at its own trial."""
    return [[urls[(2 * k + j) % len(urls)] for j in range(clips)] for k in range(workers)]


def measure(stack: Stack, urls_per_worker: list[list[str]], expected: int) -> tuple[float, float, float]:
    """One preload round: (MB/s, median worker seconds, load average while measuring)."""
    wall, received, times = preload(stack.nginx_url, stack.cert, urls_per_worker)
    if received != expected:
        raise RuntimeError(f"received {received} bytes, expected {expected}")
    return received / wall / 1e6, statistics.median(times), os.getloadavg()[0]


def main() -> None:
    from benchmarks._common import print_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=50, help="workers preloading at once")
    parser.add_argument("--clips", type=int, default=2, help="clips each worker preloads (a DCR trial: 2)")
    parser.add_argument("--megabytes", type=float, default=10.0, help="size of each clip")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per way (medians are printed)")
    args = parser.parse_args()
    if not NGINX.exists():
        sys.exit(f"{NGINX} is missing: make nginx (apt-get install nginx)")
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"perceptlab-video-delivery-{os.getpid()}"
    figures: dict[str, list[tuple[float, float, float]]] = {"a": [], "b": [], "c": []}
    try:
        manifest = video_study(work / "study")
        stimuli = manifest.parent.parent
        clip = clip_bytes(work / "clip.mp4", args.megabytes)
        size = clip.stat().st_size
        expected = args.workers * args.clips * size
        extra = f"    location {DIRECT_LOCATION} {{\n        alias {stimuli.as_posix()}/;\n    }}\n\n"
        with Stack(work / "accel", manifest, workers=4, threads=2, accel_root=stimuli, study=STUDY,
                   extra_site=extra) as stack:
            swap_in_big_clips(stimuli, clip)
            urls = trial_urls(stack)
            # The same files by the direct location: where the app's X-Accel-Redirect points, read from gunicorn.
            import requests

            plain = requests.Session()
            plain.trust_env = False
            direct = {url: DIRECT_LOCATION + plain.get(stack.direct_url + url, timeout=30)
                      .headers["X-Accel-Redirect"][len(ACCEL_LOCATION):] for url in urls}
            through_app = assignments(urls, args.workers, args.clips)
            by_nginx = [[direct[url] for url in urls] for urls in through_app]
            preload(stack.nginx_url, stack.cert, [urls] + [list(direct.values())])  # warm: ETags, page cache
            for _ in range(args.rounds):
                figures["a"].append(measure(stack, through_app, expected))
                figures["b"].append(measure(stack, by_nginx, expected))
        with Stack(work / "plain", manifest, workers=4, threads=2, study=STUDY) as stack:
            urls = trial_urls(stack)
            through_app = assignments(urls, args.workers, args.clips)
            preload(stack.nginx_url, stack.cert, [urls])
            for _ in range(args.rounds):
                figures["c"].append(measure(stack, through_app, expected))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def median(way: str, column: int) -> float:
        return statistics.median(row[column] for row in figures[way])

    names = {"a": "(a) app authorises, nginx streams (X-Accel-Redirect)", "b": "(b) nginx serves the files directly",
             "c": "(c) the app sends the files itself (through nginx)"}
    print(f"# {args.workers} workers at once, each preloading {args.clips} clips of {size / 1e6:.1f} MB over one "
          f"TLS connection to nginx; gunicorn gthread 4x2 on PostgreSQL; medians of {args.rounds} rounds; "
          f"{os.cpu_count()} CPUs")
    print_table(["way", "MB/s", "median worker preload s", "load average (1 min)", "vs (b)"],
                [[names[w], f"{median(w, 0):.0f}", f"{median(w, 1):.2f}", f"{median(w, 2):.1f}",
                  f"{median(w, 0) / median('b', 0):.2f}"] for w in "abc"])
    print(f"ratio (a)/(b) = {median('a', 0) / median('b', 0):.2f} (goal >= 0.8)")


if __name__ == "__main__":
    main()

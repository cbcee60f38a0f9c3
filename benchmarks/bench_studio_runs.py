"""The studio's Watch and Compare on a big workspace: 10 runs of 100,000 metrics lines each.

The workspace is made here: one tiny ensemble trained for 3 steps by `microgpt train`, its checkpoint copied
to 10 runs, each given a metrics log of --lines records synthesised in the format train writes (the figures
of that run's own last record, varied step by step) and a results.jsonl line. Then a real `microgpt studio`
serves it, and this measures, cold (the studio just started):

- the API: `/api/runs` (what Compare opens with) and `/api/metrics` for each of the 10 runs (what Watch opens
  with, following them all), one after the other;
- on a second fresh studio, headless Chromium (where chromium and chromedriver are installed): the page opened on Compare until its
  table holds the 10 rows, and on Watch following the 10 runs until every chart is drawn with all of them;
- the studio's peak resident memory (VmHWM) over all of it.

Goals: each view open within 2 s, the server under 300 MiB. The CPU model (lscpu) is printed with the figures.

    python benchmarks/bench_studio_runs.py                 # 10 runs x 100,000 lines
    python benchmarks/bench_studio_runs.py --runs 3 --lines 20000 --no-browser
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 2.0
GOAL_MIB = 300
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "it"]


def cpu_model_name() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no lscpu)"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name:")), "unknown")


def make_workspace(root: Path, runs: int, lines: int) -> list[str]:
    """The workspace: a text, one trained run copied to `runs` runs, each with a synthesised metrics log."""
    text = "\n".join(" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(8)) for i in range(300))
    (root / "tiny.txt").write_text(text + "\n", encoding="utf-8")
    seed = root / "checkpoints" / "seed"
    subprocess.run([sys.executable, "-m", "microgpt", "train", "tiny.txt", "--family", "ensemble", "--cooperative",
                    "d2x8n1,d2x8n1", "--stream-dim", "16", "--seq-len", "16", "--steps", "3", "--batch-size", "4",
                    "--backend", "numpy", "--threads", "1", "--gen", "0", "--model", str(seed)],
                   cwd=root, check=True, capture_output=True)
    template = json.loads((seed.parent / "seed.metrics.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    results = json.loads((seed.parent / "results.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    names = []
    for r in range(runs):
        name = f"run{r + 1}"
        shutil.copytree(seed, seed.parent / name)
        with open(seed.parent / f"{name}.metrics.jsonl", "w", encoding="utf-8") as log:
            for step in range(1, lines + 1):
                record = {key: (value * (1 + 0.3 * math.sin(step / 500 + r)) if isinstance(value, float) else value)
                          for key, value in template.items() if key != "val_loss"}
                record.update(step=step, time=step * 0.02, loss=3 / step ** 0.2 + 0.01 * r)
                if step % 100 == 0:
                    record["val_loss"] = 3.1 / step ** 0.2
                log.write(json.dumps(record) + "\n")
        with open(seed.parent / "results.jsonl", "a", encoding="utf-8") as out:
            out.write(json.dumps({**results, "checkpoint": str(seed.parent / name), "run": name}) + "\n")
        names.append(f"checkpoints/{name}")
    shutil.rmtree(seed)
    (seed.parent / "seed.metrics.jsonl").unlink()
    return names


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure_api(http, runs: list[str]) -> dict:
    """Compare's request, then Watch's (one after the other), at the points the page asks for with this many
    runs followed (charts.js: POINT_BUDGET over them, MIN_POINTS to POINTS each)."""
    points = max(400, min(2000, 4000 // len(runs)))
    compare = timed(lambda: http.get("/api/runs").raise_for_status())
    each = [timed(lambda run=run: http.get("/api/metrics", params={"run": run, "points": points}).raise_for_status())
            for run in runs]
    return {"compare": compare, "watch": sum(each), "slowest_run": max(each), "points": points}


@contextlib.contextmanager
def serving(root: Path):
    """A fresh `microgpt studio` on the workspace (its caches cold): (its URL, an API client, its process)."""
    import httpx

    studio = subprocess.Popen([sys.executable, "-m", "microgpt", "studio", str(root), "--port", "0", "--no-browser"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://\S+", studio.stdout.readline()).group(0)
        yield url, httpx.Client(base_url=url.split("/?")[0], timeout=300,
                                headers={"X-Studio-Token": url.split("token=")[1]}), studio
    finally:
        studio.terminate()
        studio.wait(60)


def measure_browser(url: str, runs: list[str]) -> dict | None:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        print("no chromium and chromedriver here: the browser figures are left out")
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):
        options.add_argument(argument)
    options.binary_location = chromium
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    figures = {}
    try:
        driver.get(url)  # once, to keep the token (and warm the browser's cache of the scripts)
        WebDriverWait(driver, 120).until(lambda d: d.execute_script("return document.body.dataset.ready") == "yes")
        for view, hash_, done in (
                ("compare", "#view=compare",
                 f"return document.querySelectorAll('#runs-table tbody tr').length >= {len(runs)}"),
                ("watch", "#view=watch&runs=" + ",".join(runs),
                 ("const charts = [...document.querySelectorAll('#charts .chart')];"
                  "return document.body.dataset.ready === 'yes' && charts.length > 0 && charts.every(c => c.data && "
                  f"new Set(c.data.map(t => t.meta)).size === {len(runs)} && c.querySelector('svg.plot path.line'));"))):
            driver.get("about:blank")
            start = time.perf_counter()
            driver.get(url.split("?")[0] + hash_)
            WebDriverWait(driver, 300, poll_frequency=0.02).until(lambda d, done=done: d.execute_script(done))
            figures[view] = time.perf_counter() - start
        figures["charts"] = driver.execute_script("return document.querySelectorAll('#charts .chart').length")
    finally:
        driver.quit()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--lines", type=int, default=100_000, help="metrics records per run")
    parser.add_argument("--no-browser", action="store_true", help="the API figures only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-studio-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        runs = make_workspace(root, args.runs, args.lines)
        size = sum(f.stat().st_size for f in (root / "checkpoints").glob("*.metrics.jsonl"))
        print(f"workspace: {args.runs} runs x {args.lines:,} metrics lines ({size / 2**20:,.0f} MiB of logs), made in "
              f"{time.perf_counter() - start:.0f} s")
        with serving(root) as (_, http, studio):
            api = measure_api(http, runs)
            rss = peak_rss_mib(studio.pid)
        browser = None
        if not args.no_browser:
            with serving(root) as (url, _, studio):
                browser = measure_browser(url, runs)
                rss = max(rss, peak_rss_mib(studio.pid))
    print(f"machine: {cpu_model_name()}")
    print(f"API: Compare (/api/runs) {api['compare']:.2f} s; Watch ({args.runs} x /api/metrics, {api['points']} "
          f"points each) {api['watch']:.2f} s "
          f"(slowest run {api['slowest_run']:.2f} s)")
    if browser:
        print(f"Chromium: Compare open {browser['compare']:.2f} s; Watch open with {args.runs} runs "
              f"({browser['charts']} charts) {browser['watch']:.2f} s")
    print(f"studio peak RSS {rss:.0f} MiB")
    worst = max([api["compare"], api["watch"], *([browser["compare"], browser["watch"]] if browser else [])])
    print(f"goal: each view within {GOAL_S:g} s ({'met' if worst < GOAL_S else 'MISSED'}: {worst:.2f} s), "
          f"under {GOAL_MIB} MiB ({'met' if rss < GOAL_MIB else 'MISSED'})")


if __name__ == "__main__":
    main()

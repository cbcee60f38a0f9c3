"""The studio's web app: its pages, and the JSON API they call, over one workspace.

Routes (all behind guard.Guard): `/` the page; `/static/NAME` its scripts and styles; `/api/graph/palette`,
`/api/graph/settings`, `/api/graph/check`, `/api/graph/from-family` and `/api/graph/layout` the node editor's
primitives, run settings, check, family graphs and layouts (graph_palette.py, graph_run.py, graph_api.py);
`/api/graph/text`, `/api/graph/examples` and `/api/graph/example` its text view and the example documents
(graph_text.py); `/api/blocks` the workspace's library of blocks, listed (GET) and saved to (POST:
graph_blocks.py); `/api/configs`, `/api/config` and `/api/save` the named runs of studio.yaml (graph_save.py),
and the drafts a graph with problems is saved as (graph_drafts.py); `/api/runs` every run of
the workspace, and `/api/runs/NAME/start|resume|stop`; `/api/metrics` a run's curves, `/api/stream` the
records runs append (server-sent events) and `/api/csv` the selection's records; `/api/sample` a completion
streamed as it is made (server-sent events), `/api/routing` an ensemble's routing of a text (for the colours
of a sample), `/api/eval` a score or a prompt file's accuracy and `/api/inspect` a node's activations,
attention maps, the logit lens and the heads' ablation scores on a prompt (inspection.py); `/api/files` the
text files one can train on or score; `/api/free-name` the page's default run name, `/api/log` the tail of a
run's output. A user's mistake is a JSON {"error": one line} with status 400 (403 for a path outside the
workspace, 409 for a checkpoint another process writes, and for a run name that is taken: {"error", "exists":
true, "suggested": a free name}, unless the request says "overwrite": true).
"""

from __future__ import annotations

import asyncio
import codecs
import csv
import io
import json
import sys
from importlib import resources
from pathlib import Path

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from microgpt.core.errors import ConfigError, DataError
from microgpt.data.dataset import is_dataset
from microgpt.model.checkpoint import (
    CONFIG,
    TRAIN_STATE,
    CheckpointError,
    is_checkpoint,
    read_config,
    read_small,
)
from microgpt.settings.commands import SampleSettings
from microgpt.settings.known import known_settings
from microgpt.settings.named_runs import load_all_runs, load_run
from microgpt.settings.sources import Settings
from microgpt.studio.graph_api import check_request, from_family_request, layout_request
from microgpt.studio.graph_blocks import blocks, save_block
from microgpt.studio.graph_drafts import drafts, drop_draft, load_draft, save_draft
from microgpt.studio.graph_palette import palette
from microgpt.studio.graph_run import settings_form
from microgpt.studio.graph_save import run_for_editor, save_run
from microgpt.studio.graph_text import example, examples, text_request
from microgpt.studio.guard import MAX_BODY_BYTES, Guard
from microgpt.studio.last_resort import LastResort, failure, file_error
from microgpt.studio.metrics import Tail, add_speed, charts_of, each_record, last_record, log_of, read_history
from microgpt.studio.names import NameTaken, first_free
from microgpt.studio.routing import MAX_ROUTED_CHARACTERS
from microgpt.studio.runs import RunManager, check_run_name
from microgpt.studio.workspace import Workspace, WorkspaceError
from microgpt.training.run_dir import RunDirError

USER_ERRORS = (ConfigError, DataError, CheckpointError)  # a request's mistake: one line back, status 400 (or 403,
# 409, 429)
MAX_MODEL_PROCESSES = 2  # sample and eval subprocesses at once (each loads a model: about 100 MB and up)
MAX_SAMPLE_TOKENS = 20_000  # the longest sample the page asks for
HISTORY_READERS = 2  # metrics logs read at once (each holds a few blocks of its log: the server's memory stays low)
GRAPH_CHECKERS = 2  # graph checks at once, each off the event loop (a big graph's takes seconds: the rest answers)


class BusyError(ConfigError):
    """Every sample and eval slot is taken; the request may be made again later (status 429)."""
STATIC = resources.files("microgpt.studio") / "static"
STREAM_POLL_S = 0.25  # how often a stream looks for new records (a curve grows within a second of a line)
STREAM_HEARTBEAT = 20  # polls between messages when nothing changed
EVAL_TIMEOUT_S = 600
TEXT_SUFFIXES = (".txt", ".tsv", ".text", ".md", ".csv", ".py")


MAX_DIGITS = 18  # a query's whole number: far past any offset or count, and below int()'s digit limit


def is_whole_number(text: str) -> bool:
    """ASCII digits only ("²" is a digit to str.isdigit), and not so many that reading them fails."""
    return text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS


def whole_number(text: str, name: str) -> int:
    """A query parameter that must be a whole number, read, or one line saying so."""
    if not is_whole_number(text):
        raise ConfigError(f"{name} must be a whole number, not {text[:40]!r}")
    return int(text)


def sample_number(query, key: str, default: str, kind: type):
    """A sampling setting of the query read as `kind` (int or float), or one line naming it and what it got."""
    text = query.get(key, default)
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{key.replace('_', '-')} must be {'a whole number' if kind is int else 'a number'}, not "
                          f"{text[:40]!r}") from None


def record_keys(logs: list[tuple[str, Path, int | None]]) -> set[str]:
    """Every key of the records of the logs (run, log, tokens per step) that exist."""
    return {key for _, log, per_step in logs if log.is_file() for record in each_record(log, per_step) for key in record}


def csv_lines(logs: list[tuple[str, Path, int | None]], columns: list[str]):
    """The CSV of the logs' records, a few hundred rows at a time: the header, then a row a record."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for path, log, per_step in logs:
        for i, record in enumerate(each_record(log, per_step) if log.is_file() else []):
            writer.writerow({"run": path, **record})
            if i % 500 == 499:
                yield out.getvalue()
                out.seek(0)
                out.truncate()
    yield out.getvalue()


class Studio:
    """The app's state: the workspace, its runs, and whether the server is stopping (streams end then)."""

    def __init__(self, workspace: Workspace, token: str, host: str, port: int, cores: int | None = None):
        self.workspace, self.token, self.port = workspace, token, port
        self.manager = RunManager(workspace, cores)
        self.stopping = False
        self.model_processes = 0  # sample and eval subprocesses running now
        self.history_readers = anyio.CapacityLimiter(HISTORY_READERS)
        self.graph_checkers = anyio.CapacityLimiter(GRAPH_CHECKERS)
        self.saving = anyio.CapacityLimiter(1)  # one save at a time: a name's check and its write are one step
        routes = [
            Route("/", self.index), Route("/static/{name}", self.static),
            Route("/api/configs", self.configs), Route("/api/config", self.config),
            Route("/api/save", self.save, methods=["POST"]), Route("/api/runs", self.runs),
            Route("/api/runs/{name}/{action}", self.run_action, methods=["POST"]),
            Route("/api/metrics", self.metrics), Route("/api/stream", self.stream), Route("/api/csv", self.csv),
            Route("/api/sample", self.sample), Route("/api/eval", self.eval, methods=["POST"]),
            Route("/api/routing", self.routing, methods=["POST"]), Route("/api/inspect", self.inspect, methods=["POST"]),
            Route("/api/graph/palette", self.graph_palette), Route("/api/graph/settings", self.graph_settings),
            Route("/api/graph/check", self.graph_check, methods=["POST"]),
            Route("/api/graph/from-family", self.graph_from_family, methods=["POST"]),
            Route("/api/graph/layout", self.graph_layout, methods=["POST"]),
            Route("/api/graph/text", self.graph_text, methods=["POST"]),
            Route("/api/graph/examples", self.graph_examples), Route("/api/graph/example", self.graph_example),
            Route("/api/blocks", self.blocks), Route("/api/blocks", self.save_block, methods=["POST"]),
            Route("/api/files", self.files), Route("/api/free-name", self.free_name), Route("/api/log", self.log),
        ]
        handlers = {**{kind: self.error for kind in USER_ERRORS}, HTTPException: self.no_route, OSError: file_error,
                    Exception: failure}
        inner = Starlette(routes=routes, exception_handlers=handlers)
        self.app = Guard(LastResort(inner), token, host, port)

    # ---- errors ---------------------------------------------------------------------------

    async def error(self, request: Request, exc: Exception) -> JSONResponse:
        line = " ".join(str(exc).split())  # one line, even where a parser's message has several (YAML's)
        if isinstance(exc, NameTaken):
            return JSONResponse({"error": line, "exists": True, "suggested": exc.suggested}, status_code=409)
        status = (403 if isinstance(exc, WorkspaceError) else 409 if isinstance(exc, RunDirError)
                  else 429 if isinstance(exc, BusyError) else 400)
        return JSONResponse({"error": line}, status_code=status)

    @staticmethod
    async def no_route(request: Request, exc: HTTPException) -> JSONResponse:
        """A path no route has (404), or a method its route does not take (405), as one line of JSON."""
        path = request.url.path[:100]
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "GET")
            message = f"{path} takes {allowed}, not {request.method}"
        else:
            message = f"the studio has no {path}; open the page at the URL it printed"
        return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)

    @staticmethod
    async def body(request: Request) -> dict:
        """The request's JSON object, read up to MAX_BODY_BYTES (a body sent without a length is counted)."""
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                raise ConfigError(f"the request body is over {MAX_BODY_BYTES:,} bytes; the studio takes small JSON "
                                  "bodies")
        try:
            value = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise ConfigError("the request body must be a JSON object") from None
        except ValueError:  # a whole number of more digits than Python reads
            raise ConfigError("the request body has a number thousands of digits long; no setting is that "
                              "large") from None
        if not isinstance(value, dict):
            raise ConfigError("the request body must be a JSON object")
        return value

    def take_model_slot(self, what: str) -> None:
        """One of the MAX_MODEL_PROCESSES sample and eval processes that may run at once (`free_model_slot`
        gives it back), or one line saying that they are all taken."""
        if self.model_processes >= MAX_MODEL_PROCESSES:
            raise BusyError(f"{MAX_MODEL_PROCESSES} samples and evaluations are running already; wait for one to "
                            f"finish before this {what}")
        self.model_processes += 1

    def free_model_slot(self) -> None:
        self.model_processes -= 1

    def checkpoint(self, text) -> Path:
        path = self.workspace.whole_inside(self.workspace.run_of(text, what="the checkpoint"))
        if not is_checkpoint(path):
            raise ConfigError(f"{text} is not a microgpt checkpoint (no config.json and weights); pick a run that "
                              "has saved")
        return path

    # ---- pages ------------------------------------------------------------------------------

    async def index(self, request: Request) -> HTMLResponse:
        """The page: no secret in it (it reads the token from its URL, or its origin's localStorage)."""
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        ours = {entry.name for entry in STATIC.iterdir()}
        if name not in ours or name == "index.html":
            return JSONResponse({"error": f"no such file {name!r}"}, status_code=404)
        kind = {".js": "text/javascript", ".css": "text/css"}.get(Path(name).suffix, "application/octet-stream")
        return Response((STATIC / name).read_bytes(), media_type=kind)

    # ---- compose ----------------------------------------------------------------------------

    async def graph_palette(self, request: Request) -> JSONResponse:
        return JSONResponse(palette())

    async def graph_settings(self, request: Request) -> JSONResponse:
        return JSONResponse(settings_form())

    async def graph_check(self, request: Request) -> JSONResponse:
        body = await self.body(request)
        checked = await anyio.to_thread.run_sync(check_request, body, self.workspace, limiter=self.graph_checkers)
        return JSONResponse(checked.as_json())

    async def graph_from_family(self, request: Request) -> JSONResponse:
        body = await self.body(request)
        return JSONResponse(await anyio.to_thread.run_sync(from_family_request, body, self.workspace,
                                                           limiter=self.graph_checkers))

    async def graph_layout(self, request: Request) -> JSONResponse:
        body = await self.body(request)
        return JSONResponse(await anyio.to_thread.run_sync(layout_request, body, limiter=self.graph_checkers))

    async def graph_text(self, request: Request) -> JSONResponse:
        body = await self.body(request)
        return JSONResponse(await anyio.to_thread.run_sync(text_request, body, limiter=self.graph_checkers))

    async def graph_examples(self, request: Request) -> JSONResponse:
        return JSONResponse(examples())

    async def graph_example(self, request: Request) -> JSONResponse:
        return JSONResponse(example(request.query_params.get("name")))

    async def blocks(self, request: Request) -> JSONResponse:
        return JSONResponse(await anyio.to_thread.run_sync(blocks, self.workspace, limiter=self.history_readers))

    async def save_block(self, request: Request) -> JSONResponse:
        """A group saved into the workspace's library (graph_blocks.py); a name another block has is refused
        (409) unless the body says "overwrite": true."""
        body = await self.body(request)
        return JSONResponse(await anyio.to_thread.run_sync(save_block, self.workspace, body, limiter=self.saving))

    async def configs(self, request: Request) -> JSONResponse:
        runs = [named.id for named in load_all_runs(self.workspace.config)] if self.workspace.config.exists() else []
        return JSONResponse({"runs": runs, "drafts": drafts(self.workspace)})

    async def config(self, request: Request) -> JSONResponse:
        name = check_run_name(request.query_params.get("name"))
        if request.query_params.get("draft"):
            return JSONResponse(load_draft(self.workspace, name))
        return JSONResponse(run_for_editor(load_run(self.workspace.config, name), self.workspace))

    async def free_name(self, request: Request) -> JSONResponse:
        """The page's default run name: the first of run1, run2, ... with no run in studio.yaml and no checkpoint."""
        return JSONResponse({"name": first_free(self.workspace)})

    async def save(self, request: Request) -> JSONResponse:
        """The draft as run NAME of studio.yaml, once it has no problem (graph_save.save_run: a family's own graph
        as the family's settings, any other as a graph run); a name that has a run or a checkpoint already is
        refused (409, names.guard_name) unless the body says "overwrite": true."""
        body = await self.body(request)
        return JSONResponse(*await anyio.to_thread.run_sync(self.saved, body, limiter=self.saving))

    def saved(self, body: dict) -> tuple[dict, int]:
        """(the answer, its status) of a save, off the event loop: it waits for the graph's causality verdict."""
        name = check_run_name(body.get("name"))
        saved = save_run(self.workspace, name, body)
        if "errors" in saved:  # kept as a draft, never a run until its problems are fixed
            return save_draft(self.workspace, name, body, saved["errors"])
        drop_draft(self.workspace, name)
        return saved, 200

    # ---- runs -------------------------------------------------------------------------------

    async def runs(self, request: Request) -> JSONResponse:
        states = [*self.manager.states(), *self.manager.others()]
        rows = await anyio.to_thread.run_sync(self.run_rows, states, limiter=self.history_readers)
        return JSONResponse({"runs": rows, "cores": self.manager.cores,
                             "threads_in_use": self.manager.threads_in_use()})

    def run_rows(self, states: list[dict]) -> list[dict]:
        """Every run's row, with the state of those training (`states`), off the event loop: it reads each
        checkpoint's files."""
        rows = {row["path"]: row for row in self.workspace.runs()}
        for state in states:
            row = rows.setdefault(state["checkpoint"], {"path": state["checkpoint"], "name": state["name"],
                                                       "has_metrics": True})
            row["studio"] = state
        for path, row in list(rows.items()):  # a -best saved before its training run's first save: the run's
            run = rows.get(row.get("best_of"))
            if run is not None and run is not row:
                run.update(best_checkpoint=row["best_checkpoint"], best_step=row["best_step"],
                           best_val_loss=run.get("best_val_loss") or row.get("best_val_loss"))
                del rows[path]
        for row in rows.values():
            self.whole_run_figures(row)
        return list(rows.values())

    def whole_run_figures(self, row: dict) -> None:
        """A row's seconds and tokens/s over every leg of its run (results.jsonl gives the last leg's): from its
        metrics log's last record, whose time goes on across resumes."""
        if row.get("damaged") or not row.get("has_metrics"):
            return
        try:
            checkpoint = self.workspace.run_of(row["path"])
            last = last_record(self.workspace.file_inside(log_of(checkpoint)))
        except WorkspaceError:
            return
        if last is None or not last.get("time"):
            return
        row["seconds"] = round(last["time"], 1)
        add_speed(last, self.tokens_per_step(checkpoint))
        if "tokens_per_s" in last:
            row["tokens_per_sec"] = round(last["tokens_per_s"], 1)

    async def log(self, request: Request) -> JSONResponse:
        """The tail of the output of a run this studio started ({"name", "lines"}), for a failed run's row."""
        name = check_run_name(request.query_params.get("name"))
        return JSONResponse({"name": name, "lines": self.manager.log_tail(name)})

    async def run_action(self, request: Request) -> JSONResponse:
        name, action = check_run_name(request.path_params["name"]), request.path_params["action"]
        if action == "start":
            body = await self.body(request) if int(request.headers.get("content-length") or 0) else {}
            run = self.manager.start(name, overwrite=body.get("overwrite") is True)
        elif action == "resume":
            run = self.manager.start(name, resume=True)
        elif action == "stop":
            run = self.manager.stop(name)
            if isinstance(run, dict):  # a run another process started: told to stop, it saves and exits
                return JSONResponse(run)
        else:
            return JSONResponse({"error": f"no action {action!r}; start, resume or stop"}, status_code=404)
        return JSONResponse({**run.state(), "checkpoint": self.workspace.relative(run.checkpoint)})

    def tokens_per_step(self, checkpoint: Path) -> int | None:
        """Tokens one step trains (batch x context), from the checkpoint, else from its named run."""
        try:
            config = json.loads(read_small(self.workspace.file_inside(checkpoint / CONFIG)))
            state = json.loads(read_small(self.workspace.file_inside(checkpoint / TRAIN_STATE)))
            return int(config["model"]["seq_len"]) * int(state["train_config"]["batch_size"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError, WorkspaceError):
            pass
        try:
            settings = Settings({}, load_run(self.workspace.config, checkpoint.name))
            return settings.value("seq_len") * settings.value("batch_size")
        except ConfigError:
            return None

    async def metrics(self, request: Request) -> JSONResponse:
        run = request.query_params.get("run")
        log = self.workspace.run_log(run)
        points = min(max(whole_number(request.query_params.get("points", "2000"), "points"), 10), 20000)
        per_step = self.tokens_per_step(self.workspace.run_of(run))
        history = await anyio.to_thread.run_sync(read_history, log, per_step, points,  # the streams go on
                                                 limiter=self.history_readers)
        return JSONResponse({**history, "run": request.query_params["run"], "tokens_per_step": per_step})

    async def stream(self, request: Request) -> StreamingResponse:
        """Server-sent events: the records each followed run appends, and the studio's runs' states."""
        tails = {}
        for spec in request.query_params.getlist("run"):  # PATH|OFFSET|INODE, as /api/metrics gave them
            path, offset, inode = (spec.rsplit("|", 2) + ["0", ""])[:3] if spec.count("|") >= 2 else (spec, "0", "")
            if not is_whole_number(offset) or not (is_whole_number(inode) or inode == ""):
                raise ConfigError(f"a stream cursor is PATH|OFFSET|INODE with whole numbers, not {spec!r}")
            tails[path] = Tail(self.workspace.run_log(path), int(offset), int(inode) if inode else None)

        async def events():
            last_states, quiet = None, 0
            while not self.stopping:
                # each record's charts, and tokens/s's, which the page works out from the records' times
                records = {path: {"rows": rows, "offset": tail.offset, "inode": tail.inode,
                                  "charts": charts_of({key for row in rows for key in row} | {"tokens_per_s"})}
                           for path, tail in tails.items() if (rows := tail.read())}
                replaced = [path for path, tail in tails.items() if tail.replaced]
                for path in replaced:
                    del tails[path]
                states = self.manager.states()
                if records or replaced or states != last_states or quiet >= STREAM_HEARTBEAT:
                    message = {"records": records, "replaced": replaced, "states": states}
                    yield f"data: {json.dumps(message)}\n\n"
                    last_states, quiet = states, 0
                else:
                    quiet += 1
                await asyncio.sleep(STREAM_POLL_S)

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def csv(self, request: Request) -> StreamingResponse:
        """Every record of the selected runs, one row each, as CSV (run, step, time, then the other keys), streamed
        as the logs are read: its columns come of a first reading, off the event loop."""
        paths = request.query_params.getlist("run")
        if not paths:
            raise ConfigError("no run is selected; tick the runs to download first")
        logs = [(path, self.workspace.run_log(path), self.tokens_per_step(self.workspace.run_of(path)))
                for path in paths]
        keys = await anyio.to_thread.run_sync(record_keys, logs, limiter=self.history_readers)
        if not keys:
            raise ConfigError("the selected runs have no metrics records yet; nothing to download")
        columns = ["run", "step", "time", *sorted(keys - {"step", "time"})]
        return StreamingResponse(csv_lines(logs, columns), media_type="text/csv",  # a generator: run in a thread
                                 headers={"Content-Disposition": 'attachment; filename="metrics.csv"'})

    # ---- sample and evaluate ----------------------------------------------------------------

    @staticmethod
    def backend_of(backend) -> str:
        """A request's backend, checked as train's --backend is (auto when it gives none)."""
        backend = backend or "auto"
        try:
            known_settings()["backend"].check.validate(backend)
        except ValueError as exc:
            raise ConfigError(f"backend must be {exc}, not {backend!r}") from None
        return backend

    def model_command(self, command: str, checkpoint: Path, backend) -> list[str]:
        return [sys.executable, "-m", "microgpt", command, str(checkpoint), "--backend", self.backend_of(backend),
                "--threads", "1"]

    async def sample(self, request: Request) -> StreamingResponse:
        """Server-sent events: the text of `microgpt sample` as it prints it, then done (or an error)."""
        q = request.query_params
        checkpoint = self.checkpoint(q.get("checkpoint"))
        try:
            chosen = SampleSettings(prompt=q.get("prompt", ""), tokens=sample_number(q, "tokens", "200", int),
                                    temperature=sample_number(q, "temperature", "0.8", float),
                                    top_k=sample_number(q, "top_k", "0", int), top_p=sample_number(q, "top_p", "1", float),
                                    seed=sample_number(q, "seed", "0", int))
        except ValueError as exc:  # a number out of its range: the flag's own line
            raise ConfigError(str(exc)) from None
        if "\0" in chosen.prompt:
            raise ConfigError("the prompt holds a NUL character, which no text file or tokenizer has; remove it")
        if chosen.tokens > MAX_SAMPLE_TOKENS:
            raise ConfigError(f"tokens must be at most {MAX_SAMPLE_TOKENS:,} here, not {chosen.tokens:,}; sample "
                              "longer texts with `microgpt sample`")
        command = self.model_command("sample", checkpoint, q.get("backend")) + [
            f"--prompt={chosen.prompt}", "--tokens", str(chosen.tokens), "--temperature", str(chosen.temperature),
            "--top-k", str(chosen.top_k), "--top-p", str(chosen.top_p), "--seed", str(chosen.seed)]
        self.take_model_slot("sample")
        try:
            process = await asyncio.create_subprocess_exec(
                *command, cwd=self.workspace.root, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE)
        except BaseException:
            self.free_model_slot()
            raise

        async def events():
            utf8 = codecs.getincrementaldecoder("utf-8")("replace")  # a character split between reads waits
            try:
                while True:
                    if self.stopping:
                        yield f"data: {json.dumps({'error': 'the studio is stopping'})}\n\n"
                        return
                    try:  # a read cut short loses nothing: what came stays in the reader's buffer
                        data = await asyncio.wait_for(process.stdout.read(64), STREAM_POLL_S)
                    except asyncio.TimeoutError:
                        continue
                    if not data:
                        break
                    text = utf8.decode(data)
                    if text:
                        yield f"data: {json.dumps({'text': text})}\n\n"
                code = await process.wait()
                errors = (await process.stderr.read()).decode("utf-8", errors="replace")
                if code != 0:
                    lines = [line for line in errors.splitlines() if line.strip()]
                    yield f"data: {json.dumps({'error': lines[-1] if lines else f'sample exited with {code}'})}\n\n"
                else:
                    yield f"data: {json.dumps({'done': True})}\n\n"
            finally:  # also when the page goes (a new Generate aborts the old stream): each await here may
                self.free_model_slot()  # be cancelled again, so the slot goes back first and the wait is shielded
                if process.returncode is None:
                    process.kill()
                    with anyio.CancelScope(shield=True):
                        await process.wait()

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def eval(self, request: Request) -> JSONResponse:
        """`microgpt eval --json` of a checkpoint on a text file, or on a prompts file (exact-match accuracy)."""
        body = await self.body(request)
        checkpoint = self.checkpoint(body.get("checkpoint"))
        command = self.model_command("eval", checkpoint, body.get("backend")) + ["--json"]
        if body.get("prompts"):
            command += [f"--prompts={self.workspace.inside(body['prompts'], what='the prompts file')}"]
        elif body.get("file"):  # a prepared dataset's shards too
            command += ["--", str(self.workspace.whole_inside(self.workspace.inside(body["file"],
                                                                                    what="the file to score")))]
        else:
            raise ConfigError("give a file to score, or a prompts file of prompt<TAB>answer lines")
        self.take_model_slot("evaluation")
        try:
            out, err, code = await self.run_eval(command)
        finally:
            self.free_model_slot()
        if code != 0:
            lines = [line for line in err.decode("utf-8", errors="replace").splitlines() if line.strip()]
            line = lines[-1].removeprefix("microgpt eval: error: ") if lines else f"eval exited with status {code}"
            raise ConfigError(line.replace(f"{self.workspace.root}/", ""))  # the workspace's files as the page names them
        return JSONResponse(json.loads(out.decode("utf-8").strip().splitlines()[-1]))

    async def routing(self, request: Request) -> JSONResponse:
        """An ensemble checkpoint's routing of a text ({"routing": Routing.as_json()}), from studio/routing.py in a
        subprocess; {"routing": null} for a checkpoint of another family, which has none."""
        body = await self.body(request)
        checkpoint = self.checkpoint(body.get("checkpoint"))
        text = body.get("text")
        if not isinstance(text, str) or not text or "\0" in text:
            raise ConfigError("give the text to route: the sample's text, without NUL characters")
        if len(text) > MAX_ROUTED_CHARACTERS:
            raise ConfigError(f"the text is {len(text):,} characters; the studio routes at most "
                              f"{MAX_ROUTED_CHARACTERS:,}")
        if read_config(checkpoint).get("family") != "ensemble":
            return JSONResponse({"routing": None})
        command = [sys.executable, "-m", "microgpt.studio.routing", str(checkpoint), "--backend",
                   self.backend_of(body.get("backend"))]
        self.take_model_slot("routing")
        try:
            out, err, code = await self.run_eval(command, stdin=text.encode("utf-8"))
        finally:
            self.free_model_slot()
        if code != 0:
            lines = [line for line in err.decode("utf-8", errors="replace").splitlines() if line.strip()]
            raise ConfigError(lines[-1] if lines else f"routing exited with status {code}")
        return JSONResponse({"routing": json.loads(out.decode("utf-8").strip().splitlines()[-1])})

    async def inspect(self, request: Request) -> JSONResponse:
        """A checkpoint's paths, and for a prompt the inspect figures of a node, the logit lens and the head
        ablations (studio/inspection.py's JSON), from that helper in a subprocess."""
        body = await self.body(request)
        checkpoint = self.checkpoint(body.get("checkpoint"))
        text, node = body.get("text", ""), body.get("node") or None
        if not isinstance(text, str) or "\0" in text:
            raise ConfigError("give the prompt to inspect as text, without NUL characters")
        if node is not None and not isinstance(node, str):
            raise ConfigError("give the node as its path, e.g. blocks.0.attn.heads")
        command = [sys.executable, "-m", "microgpt.studio.inspection", str(checkpoint), "--backend",
                   self.backend_of(body.get("backend"))] + ([f"--node={node}"] if node else [])
        self.take_model_slot("inspection")
        try:
            out, err, code = await self.run_eval(command, stdin=text.encode("utf-8"))
        finally:
            self.free_model_slot()
        if code != 0:
            lines = [line for line in err.decode("utf-8", errors="replace").splitlines() if line.strip()]
            raise ConfigError(lines[-1] if lines else f"inspect exited with status {code}")
        return JSONResponse(json.loads(out.decode("utf-8").strip().splitlines()[-1]))

    async def run_eval(self, command: list[str], stdin: bytes | None = None) -> tuple[bytes, bytes, int]:
        """(stdout, stderr, status) of `microgpt eval` (or the routing helper, fed `stdin`), killed past
        EVAL_TIMEOUT_S or when the request goes."""
        process = await asyncio.create_subprocess_exec(
            *command, cwd=self.workspace.root, stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin), EVAL_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise ConfigError(f"eval took longer than {EVAL_TIMEOUT_S} s; score a shorter file") from None
        finally:
            if process.returncode is None:
                process.kill()
                with anyio.CancelScope(shield=True):  # reaped even when the request is cancelled
                    await process.wait()
        return out, err, process.returncode

    async def files(self, request: Request) -> JSONResponse:
        """Text files and prepared datasets of the workspace (two levels down, no hidden ones, none inside a
        checkpoint)."""
        found = []
        for directory in [self.workspace.root, *[p for p in sorted(self.workspace.root.iterdir())
                                                 if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
                                                 and not is_checkpoint(p) and not is_dataset(p)]]:
            for path in sorted(directory.iterdir()):
                if path.is_symlink() or path.name.startswith("."):
                    continue
                if (path.suffix in TEXT_SUFFIXES and path.is_file()) or (path.is_dir() and is_dataset(path)):
                    found.append(self.workspace.relative(path))
        return JSONResponse({"files": found})


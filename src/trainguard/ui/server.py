"""The job pages over HTTP: the page, its JSON, its updates (server-sent events) and actions.

- ``GET /`` the page; ``GET /static/<file>`` its modules and style (from the package: no CDN).
- ``GET /api/session``: whether this browser may act, and its token for the actions.
- ``GET /api/jobs``, ``GET /api/jobs/<name>``, ``GET /api/jobs/<name>/logs?pod=P&lines=N``,
  ``GET /api/jobs/<name>/whatif?pod=P&fault=F``: what the page shows.
- ``GET /api/stream`` (every job) or ``GET /api/stream?job=<name>``: the same JSON again whenever it changes,
  as server-sent events.
- ``GET /api/create``: the create page's dialects and its form's first values; ``GET /api/create/draft?form=F``
  (``F`` the form as JSON): the job in the dialect chosen, its YAML and ``trainguard validate``'s problems with
  it (``trainguard.ui.create``).
- ``POST /api/jobs/<name>/scale`` ``{"role", "replicas"}``; ``POST /api/chaos`` ``{"action", "target", ...}``
  where the backend has chaos (the local runtime); ``POST /api/create`` ``{"form"}``: the job submitted to the
  backend, when it is valid (nothing is, when it is not).

**Who may act.** The address that ``trainguard ui --url`` prints carries the server's secret
(``/?token=...``): opening it sets a session cookie (HttpOnly, SameSite=Strict) and the page gets that
session's own token from ``/api/session``, which it sends with every POST (``X-Trainguard-Token``). A POST
without both is refused (403), so no other site can make a browser act (it can neither send the cookie nor
read the token), and a page opened without the secret is read-only. Only the user who can read the CLI's files
can read the secret: the same right as the CLI's. Requests naming another host than the server's own
(``Host``: only the address it listens on, ``127.0.0.1``, ``localhost`` or ``[::1]``, with any port, as
through ``kubectl port-forward``) are refused, against DNS rebinding. Every value reaches the page as JSON and is put in as text.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from trainguard.api.model import SUPPORTED_FRAMEWORKS, TrainingJob
from trainguard.ui import create, pages
from trainguard.ui.pages import PageError

log = logging.getLogger("trainguard.ui")

#: How often a stream looks for a change.
STREAM_EVERY_S = 0.5
#: Ages and the timeline's end move in steps of this many seconds.
CLOCK_STEP_S = 5.0
#: A comment this often keeps idle streams (and proxies) open.
KEEPALIVE_S = 15.0
SESSION_COOKIE = "trainguard_session"
TOKEN_HEADER = "X-Trainguard-Token"
_STATIC = {"app.js": "text/javascript", "timeline.js": "text/javascript", "style.css": "text/css"}
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
MAX_BODY = 64 * 1024


class Source(Protocol):
    """What a backend gives the pages. Methods raise ``PageError`` with a message for the user."""

    backend: str  # "local" or "kubernetes"
    chaos_actions: tuple[str, ...]  # the chaos the backend can inject (none on Kubernetes)
    namespace: str  # where the create page puts a job unless told otherwise

    def jobs(self) -> list[tuple[str, TrainingJob, dict[str, Any]]]:
        """(key, job, view) of every job; the key names the job in the pages (its name, or namespace/name)."""
        ...

    def job(self, key: str) -> tuple[TrainingJob, dict[str, Any]]: ...

    def events(self, name: str) -> list[dict[str, Any]]: ...

    def log_tail(self, name: str, pod: str, lines: int) -> list[str]: ...

    def scale(self, name: str, role: str, replicas: int) -> str: ...

    def chaos(self, action: str, target: str, exit_code: int | None) -> str: ...

    def submit(self, draft: create.Draft) -> create.Created:
        """Submit a valid job of the create page (``draft.job``) as the backend takes jobs."""
        ...


@dataclass
class Sessions:
    """The server's secret (in the address ``--url`` prints) and the sessions it opened: cookie -> token."""

    secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    _tokens: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, secret: str) -> str | None:
        """A new session's cookie, for the right secret; None otherwise."""
        if not hmac.compare_digest(secret.encode(), self.secret.encode()):
            return None
        cookie = secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[cookie] = secrets.token_urlsafe(24)
        return cookie

    def token(self, cookie: str | None) -> str | None:
        with self._lock:
            return self._tokens.get(cookie or "")

    def allows(self, cookie: str | None, token: str | None) -> bool:
        expected = self.token(cookie)
        return bool(expected and token and hmac.compare_digest(expected.encode(), token.encode()))


@dataclass(frozen=True)
class Endpoint:
    """Where the pages are served (``url`` None and ``problem`` when they are not); ``secret_url`` opens a
    session that may act."""

    url: str | None
    secret_url: str | None = None
    problem: str = ""
    close: Callable[[], None] = lambda: None

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "secret_url": self.secret_url, "problem": self.problem}


def serve(source: Source, address: str = "127.0.0.1", port: int = 0, secret: str | None = None) -> Endpoint:
    """Serve the pages from a thread of this process; a port that cannot be had is a problem, not a crash.
    ``secret``: the one that opens sessions that may act (default: a fresh random one)."""
    sessions = Sessions(secret) if secret else Sessions()
    try:
        server = _Server((address, port), _handler(source, sessions))
    except OSError as error:
        problem = f"cannot serve the job pages on {address}:{port}: {error.strerror or error}"
        log.error("%s", problem)
        return Endpoint(None, problem=problem)
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{server.server_port}/"
    # Reached directly or through a port forward (kubectl port-forward: another port), by these names only.
    server.allowed_hosts = {host, "127.0.0.1", "localhost", "[::1]"}
    thread = threading.Thread(target=server.serve_forever, name="trainguard-ui", daemon=True)
    thread.start()
    log.info("job pages at %s", url)

    def close() -> None:
        server.closing.set()
        server.shutdown()
        server.server_close()

    return Endpoint(url, f"{url}?token={sessions.secret}", close=close)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allowed_hosts: set[str] = set()

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.closing = threading.Event()


def _handler(source: Source, sessions: Sessions) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server: _Server
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s - %s", self.address_string(), format % args)

        # ---- routing ----------------------------------------------------------------------------------

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def _route(self, method: str) -> None:
            if _hostname(self.headers.get("Host", "")) not in self.server.allowed_hosts:
                self._send_json({"error": "unknown host; open the address trainguard printed"}, 421)
                return
            split = urlsplit(self.path)
            path, query = split.path, {k: v[-1] for k, v in parse_qs(split.query).items()}
            try:
                if method == "GET":
                    self._get(path, query)
                else:
                    self._post(path)
            except PageError as error:
                self._send_json({"error": str(error)}, error.status)
            except (BrokenPipeError, ConnectionResetError):
                pass
            except Exception:  # a bug must not take the server down, nor show a traceback
                log.exception("the job pages failed on %s %s", method, path)
                self._send_json({"error": "internal error; see the control plane's log"}, 500)

        def _get(self, path: str, query: dict[str, str]) -> None:
            if path == "/":
                self._index(query.get("token"))
            elif path.startswith("/static/") and path.removeprefix("/static/") in _STATIC:
                name = path.removeprefix("/static/")
                body = resources.files("trainguard.ui").joinpath("static").joinpath(name).read_bytes()
                self._send(body, _STATIC[name])
            elif path == "/api/session":
                token = sessions.token(self._cookie())
                self._send_json(
                    {
                        "backend": source.backend,
                        "actions": token is not None,
                        "token": token,
                        "chaos": list(source.chaos_actions),
                    }
                )
            elif path == "/api/jobs":
                self._send_json(_jobs(source))
            elif path == "/api/create":
                self._send_json(
                    {
                        "dialects": [choice.to_dict() for choice in create.CHOICES],
                        "frameworks": [framework.value for framework in SUPPORTED_FRAMEWORKS],
                        "form": create.defaults(source.namespace).to_dict(),
                    }
                )
            elif path == "/api/create/draft":
                self._send_json(create.draft(_form(query.get("form", "{}"))).to_dict())
            elif path == "/api/stream":
                self._stream(query.get("job"))
            elif path.startswith("/api/jobs/"):
                name, _, rest = path.removeprefix("/api/jobs/").partition("/")
                name = unquote(name)
                if rest == "":
                    self._send_json(_job(source, name))
                elif rest == "logs":
                    lines = _int(query.get("lines", "100"), "lines", 1, 5000)
                    self._send_json({"lines": source.log_tail(name, query.get("pod", ""), lines)})
                elif rest == "whatif":
                    job, view = source.job(name)
                    self._send_json(
                        pages.what_if_answer(job, view, query.get("pod", ""), query.get("fault", ""))
                    )
                else:
                    raise PageError("not found", 404)
            else:
                raise PageError("not found", 404)

        def _post(self, path: str) -> None:
            if not sessions.allows(self._cookie(), self.headers.get(TOKEN_HEADER)):
                raise PageError(
                    "read-only: actions need the address that 'trainguard ui --url' prints (its token)", 403
                )
            body = self._body()
            if path.startswith("/api/jobs/") and path.endswith("/scale"):
                name = unquote(path.removeprefix("/api/jobs/").removesuffix("/scale"))
                replicas = body.get("replicas")
                if not isinstance(replicas, int) or isinstance(replicas, bool):
                    raise PageError("replicas must be a whole number")
                self._send_json({"message": source.scale(name, str(body.get("role", "")), replicas)})
            elif path == "/api/chaos":
                action = str(body.get("action", ""))
                if action not in source.chaos_actions:
                    raise PageError(f"chaos {action!r} is not offered here ({source.backend})")
                code = body.get("exit_code")
                if code is not None and not isinstance(code, int):
                    raise PageError("exit_code must be a whole number")
                self._send_json({"message": source.chaos(action, str(body.get("target", "")), code)})
            elif path == "/api/create":
                draft = create.draft(create.JobForm.from_dict(body.get("form")))
                if not draft.valid:  # validation's problems, and nothing submitted
                    raise PageError(draft.refusal)
                self._send_json(source.submit(draft).to_dict())
            else:
                raise PageError("not found", 404)

        # ---- pieces -----------------------------------------------------------------------------------

        def _index(self, secret: str | None) -> None:
            if secret is not None:  # the address with the secret: a session that may act, then a clean URL
                cookie = sessions.open(secret)
                self.send_response(HTTPStatus.SEE_OTHER)
                if cookie is not None:
                    self.send_header(
                        "Set-Cookie", f"{SESSION_COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/"
                    )
                self.send_header("Location", "/")
                self.send_header("Content-Length", "0")
                self._security_headers()
                self.end_headers()
                return
            body = resources.files("trainguard.ui").joinpath("static").joinpath("index.html").read_bytes()
            self._send(body, "text/html; charset=utf-8")

        def _stream(self, job: str | None) -> None:
            """The jobs (or one job) as server-sent events: now, then whenever it changes."""

            def current() -> str:
                try:
                    return json.dumps(_job(source, job) if job else {"jobs": _jobs(source)}, sort_keys=True)
                except PageError as error:
                    return json.dumps({"error": str(error)})

            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self._security_headers()
            self.end_headers()
            self.close_connection = True
            sent, quiet_since = "", time.monotonic()
            while not self.server.closing.is_set():
                data = current()
                if data != sent:
                    self.wfile.write(f"data: {data}\n\n".encode())
                    self.wfile.flush()
                    sent, quiet_since = data, time.monotonic()
                elif time.monotonic() - quiet_since > KEEPALIVE_S:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    quiet_since = time.monotonic()
                self.server.closing.wait(STREAM_EVERY_S)

        def _cookie(self) -> str | None:
            for part in self.headers.get("Cookie", "").split(";"):
                key, _, value = part.strip().partition("=")
                if key == SESSION_COOKIE:
                    return value
            return None

        def _body(self) -> dict[str, Any]:
            length = _int(self.headers.get("Content-Length", "0"), "Content-Length", 0, MAX_BODY)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                raise PageError("the body is not JSON") from None
            if not isinstance(body, dict):
                raise PageError("the body must be a JSON object")
            return body

        def _send_json(self, data: Any, status: int = 200) -> None:
            self._send(json.dumps(data).encode(), "application/json", status)

        def _send(self, body: bytes, kind: str, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self._security_headers()
            self.end_headers()
            self.wfile.write(body)

        def _security_headers(self) -> None:
            for key, value in _SECURITY_HEADERS.items():
                self.send_header(key, value)

    return Handler


def _jobs(source: Source) -> list[dict[str, Any]]:
    return [pages.job_row(job, view, _now(), key) for key, job, view in source.jobs()]


def _job(source: Source, key: str) -> dict[str, Any]:
    job, view = source.job(key)
    return {"job": pages.job_detail(job, view, source.events(key), _now(), key)}


def _now() -> float:
    """The clock the pages show ages and the timeline's end by: in steps of ``CLOCK_STEP_S``, so that a stream
    sends a job again when something happened, or when that much time has passed, not at every look."""
    return (time.time() // CLOCK_STEP_S) * CLOCK_STEP_S


def _form(text: str) -> create.JobForm:
    try:
        data = json.loads(text)
    except ValueError:
        raise PageError("form: not JSON") from None
    return create.JobForm.from_dict(data)


def _hostname(host: str) -> str:
    """``127.0.0.1`` of ``127.0.0.1:8080``, ``[::1]`` of ``[::1]:8080``."""
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]


def _int(text: str, what: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise PageError(f"{what} must be a whole number") from None
    if not low <= value <= high:
        raise PageError(f"{what} must be in [{low}, {high}]")
    return value

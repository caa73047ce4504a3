"""The job pages of the local control plane: ``trainguard ui`` (``--url`` prints the address).

They listen on the loopback interface only, on an ephemeral port unless ``TRAINGUARD_UI_PORT`` names one
(``off`` serves nothing); ``TRAINGUARD_UI_ADDRESS`` binds elsewhere, for whoever asks for it explicitly. The
pages read what the CLI reads (``trainguard.backends.local.service``) and act through the same requests, so a
scale out of range is refused with the CLI's own message, and a job from the create page is submitted as
``trainguard run --detach`` submits one (``op_submit``), to run in the user's home directory (the form's
working directory, when relative, is taken from there).
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Any

from trainguard.api.model import TrainingJob
from trainguard.backends.local.service import RequestError, Service
from trainguard.ui.create import Created, Draft
from trainguard.ui.pages import PageError
from trainguard.ui.server import Endpoint, serve

ENV_PORT = "TRAINGUARD_UI_PORT"
ENV_ADDRESS = "TRAINGUARD_UI_ADDRESS"
DEFAULT_ADDRESS = "127.0.0.1"


class LocalSource:
    backend = "local"
    chaos_actions: tuple[str, ...] = ("kill", "hang", "evict", "force-delete", "node-down", "node-up")
    namespace = "default"

    def __init__(self, service: Service) -> None:
        self.service = service

    def jobs(self) -> list[tuple[str, TrainingJob, dict[str, Any]]]:
        found = []
        for record in self.service.store.list_jobs():
            found.append(
                (record.name, TrainingJob.model_validate(record.spec), self.service.op_get(record.name))
            )
        return found

    def job(self, name: str) -> tuple[TrainingJob, dict[str, Any]]:
        view = self._ask(self.service.op_get, job=name)
        record = self.service.store.get_job(name)
        if record is None:
            raise PageError(f"no job {name!r}", 404)
        return TrainingJob.model_validate(record.spec), view

    def events(self, name: str) -> list[dict[str, Any]]:
        return list(self._ask(self.service.op_events, job=name))

    def log_tail(self, name: str, pod: str, lines: int) -> list[str]:
        paths = self._ask(self.service.op_logs, job=name, pod=pod or None)["pods"]
        if not pod or pod not in paths:
            raise PageError("choose a pod", 400)
        try:
            with open(paths[pod], errors="replace") as handle:
                return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]
        except FileNotFoundError:
            return []

    def scale(self, name: str, role: str, replicas: int) -> str:
        done = self._ask(self.service.op_scale, job=name, role=role, replicas=replicas)
        return f"job {done['name']}: role {done['role']} scaled to {done['replicas']}"

    def chaos(self, action: str, target: str, exit_code: int | None) -> str:
        return str(self._ask(self.service.op_chaos, action=action, target=target, exit_code=exit_code))

    def submit(self, draft: Draft) -> Created:
        loaded = draft.job
        done = self._ask(
            self.service.op_submit, spec=loaded.job.to_dict(), workdir=str(Path.home()), source=draft.file
        )
        held = f" (it waits: {done['held']})" if done.get("held") else ""
        return Created(done["name"], f"job {done['name']} submitted{held}")

    @staticmethod
    def _ask(request: Any, **args: Any) -> Any:
        try:
            return request(**args)
        except RequestError as error:
            status = 404 if str(error).startswith("no job") else 400
            raise PageError(str(error), status) from None


def serve_pages(service: Service, environ: dict[str, str] | None = None) -> Endpoint:
    env = os.environ if environ is None else environ
    wanted = env.get(ENV_PORT, "").strip()
    if wanted.lower() == "off":
        return Endpoint(None, problem=f"the job pages are off ({ENV_PORT}=off)")
    try:
        port = int(wanted) if wanted else 0
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        return Endpoint(None, problem=f"{ENV_PORT}={wanted!r} is not a port number (0-65535, or off)")
    return serve(LocalSource(service), env.get(ENV_ADDRESS, "").strip() or DEFAULT_ADDRESS, port)

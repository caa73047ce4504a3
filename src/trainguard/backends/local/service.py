"""The requests the CLI sends to the control plane, and their answers (JSON-able data).

A request that cannot be carried out raises ``RequestError`` with a message for the user; it changes nothing.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from trainguard.api import SpecError, TrainingJob
from trainguard.backends.local import capacity, chaos, nodes
from trainguard.backends.local.plane import ControlPlane
from trainguard.backends.local.podenv import command
from trainguard.backends.local.processes import signal_number
from trainguard.backends.local.records import JobRecord
from trainguard.backends.local.statefile import AlreadyExists, Conflict
from trainguard.backends.local.views import job_view
from trainguard.controller.admission import Admit, Hold, admit, oversize
from trainguard.controller.agent_options import grace_seconds
from trainguard.controller.launchspec import check_runnable
from trainguard.controller.status import JobStatus
from trainguard.policy.elastic import scale_refusal

#: Exit status of a request the user must change (unknown job, value out of range, ...).
USAGE = 2


class RequestError(Exception):
    def __init__(self, message: str, exit_code: int = USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Service:
    def __init__(self, plane: ControlPlane, on_shutdown: Callable[[bool], None]) -> None:
        self.plane = plane
        self.store = plane.store
        self._on_shutdown = on_shutdown

    def handle(self, op: str, args: dict[str, Any]) -> Any:
        handler = getattr(self, f"op_{op.replace('-', '_')}", None)
        if handler is None:
            raise RequestError(f"unknown request {op!r}")
        try:
            return handler(**args)
        except TypeError as error:
            raise RequestError(f"bad request {op!r}: {error}") from None

    # ---- jobs --------------------------------------------------------------------------------------

    def op_ping(self) -> dict[str, Any]:
        import os

        return {"pid": os.getpid(), "home": str(self.plane.home.root)}

    def op_submit(
        self, spec: dict[str, Any], workdir: str, nodes: int | None = None, source: str = ""
    ) -> dict[str, Any]:
        job = _validated(spec, source)
        limit = self.plane.max_pods
        if nodes is not None and not 1 <= nodes <= limit:
            raise RequestError(
                f"--nodes {nodes}: at most {limit} nodes: a job runs at most {limit} pods here "
                f"({capacity.ENV_MAX_PODS}), so more nodes would stay empty"
            )
        with self.plane.lock:
            self._check_runnable(job, source)
            name = job.name
            previous = self.store.get_job(name, include_deleted=True)
            if previous is not None and previous.deleted:
                raise RequestError(f"job {name!r} is still being deleted; try again in a moment", exit_code=1)
            uid = job.metadata.uid or str(uuid.uuid4())
            job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": uid})})
            record = JobRecord(
                name=name,
                uid=uid,
                spec=job.to_dict(),
                spec_version=1,
                status={},
                status_version=1,
                created_at=self.plane.clock(),
                port=self._free_port(),
                nodes_wanted=nodes,
                workdir=workdir,
            )
            try:
                self.store.insert_job(record)
            except AlreadyExists:
                raise RequestError(
                    f"job {name!r} exists already; 'trainguard apply' updates it, 'trainguard delete {name}' "
                    "removes it"
                ) from None
            admission = admit(job, JobStatus(), self.plane.limit, capacity.explain, record.created_at)
            if isinstance(admission, Admit):
                capacity.ensure_nodes(self.store, job, nodes, limit)  # a held job gets its nodes when it fits
        self.plane.waker.wake()
        held = {"held": admission.message} if isinstance(admission, Hold) else {}
        return {"name": name, "uid": uid, **held}

    def op_apply(self, spec: dict[str, Any], workdir: str, source: str = "") -> dict[str, Any]:
        """Update a submitted job (e.g. its replicas), or submit it when there is none of that name."""
        job = _validated(spec, source)
        with self.plane.lock:
            record = self.store.get_job(job.name)
            if record is None:
                return {**self.op_submit(spec, workdir, None, source), "created": True}
            current = TrainingJob.model_validate(record.spec)
            if set(job.spec.replica_specs) != set(current.spec.replica_specs):
                raise RequestError(
                    f"{source or 'apply'}: spec.replicaSpecs: the roles of a submitted job cannot change "
                    f"({', '.join(current.spec.replica_specs)}); delete the job and run it again"
                )
            self._check_runnable(job, source)
            self._check_size(record, current, job, source or "apply")
            keep = current.metadata.model_copy(
                update={"labels": job.metadata.labels, "annotations": job.metadata.annotations}
            )
            updated = job.model_copy(update={"metadata": keep})
            if updated.to_dict() == record.spec:
                return {"name": job.name, "changed": False}
            try:
                self.store.update_spec(job.name, updated.to_dict(), record.spec_version)
            except Conflict:
                raise RequestError(f"job {job.name!r} changed meanwhile; apply again", exit_code=1) from None
        self.plane.waker.wake()
        return {"name": job.name, "changed": True}

    def op_get(self, job: str | None = None) -> Any:
        if job is None:
            return [self._view(record) for record in self.store.list_jobs()]
        return self._view(self._record(job))

    def op_events(self, job: str, limit: int | None = None) -> list[dict[str, Any]]:
        self._record(job)
        return [event.to_dict() for event in self.store.list_events(job, limit)]

    def op_logs(self, job: str, pod: str | None = None) -> dict[str, Any]:
        record = self._record(job)
        rows = self.store.list_pods(job)
        if pod is not None and pod not in {row.name for row in rows}:
            raise RequestError(_unknown_pod(pod, [row.name for row in rows]))
        names = [pod] if pod else [row.name for row in rows]
        return {
            "pods": {name: str(self.plane.home.pod_log(job, name)) for name in names},
            "ongoing": self._view(record)["status"]["phase"] not in ("Succeeded", "Failed", "Timeout"),
        }

    def op_scale(self, job: str, role: str, replicas: int) -> dict[str, Any]:
        with self.plane.lock:
            record = self._record(job)
            model = TrainingJob.model_validate(record.spec)
            role_name = _role(model, role)
            refusal = scale_refusal(model, role_name, replicas)
            if refusal is not None:
                raise RequestError(refusal)
            phase = record.status.get("phase", "Pending")
            if phase in ("Succeeded", "Failed", "Timeout"):
                raise RequestError(f"job {job} has ended ({phase}); it cannot be scaled")
            if not capacity.started(record):
                # Not taken up yet (maybe held for its size): the new size is its spec's, as if applied.
                return self._resize_unstarted(record, model, role_name, replicas)
            self._check_size(record, model, model, f"job {job}: role {role_name}", {role_name: replicas})
            request_id = f"cli-{uuid.uuid4().hex[:12]}"
            self.store.add_scale_request(job, request_id, role_name, replicas, self.plane.clock())
            self._ensure_capacity(model, role_name, replicas)
        self.plane.waker.wake()
        return {"name": job, "role": role_name, "replicas": replicas, "request": request_id}

    def _resize_unstarted(
        self, record: JobRecord, model: TrainingJob, role: str, replicas: int
    ) -> dict[str, Any]:
        data = model.to_dict()
        data["spec"]["replicaSpecs"][role]["replicas"] = replicas
        try:
            self.store.update_spec(record.name, data, record.spec_version)
        except Conflict:
            raise RequestError(f"job {record.name!r} changed meanwhile; scale again", exit_code=1) from None
        self.plane.waker.wake()
        return {"name": record.name, "role": role, "replicas": replicas, "request": None}

    def op_delete(self, job: str) -> dict[str, Any]:
        self.plane.delete(self._record(job))
        return {"name": job}

    def op_exists(self, job: str) -> bool:
        return self.store.get_job(job, include_deleted=True) is not None

    # ---- chaos -------------------------------------------------------------------------------------

    def op_chaos(
        self,
        action: str,
        target: str,
        signal: str | None = None,
        exit_code: int | None = None,
        item: str | None = None,
        worker: bool = False,
    ) -> str:
        runtime = self.plane.runtime
        with self.plane.lock:
            try:
                if action == "kill":
                    if exit_code is not None and not 0 <= exit_code <= 255:
                        raise RequestError(f"--exit-code {exit_code}: exit codes are 0-255")
                    signum = signal_number(signal) if signal else None
                    if worker and exit_code is not None:
                        raise RequestError(
                            "--worker kills a training process by a signal; leave out --exit-code"
                        )
                    message = chaos.kill(runtime, target, signum, exit_code, worker=worker)
                elif action == "hang":
                    message = chaos.hang(runtime, target)
                elif action == "evict":
                    message = chaos.evict(runtime, target, self._grace(target))
                elif action == "force-delete":
                    message = chaos.force_delete(runtime, target)
                elif action == "node-down":
                    message = chaos.node_down(runtime, target)
                elif action == "node-up":
                    message = chaos.node_up(runtime, target)
                elif action == "hardware-fault":
                    message = nodes.inject(self.plane.home, self.store, target, item)
                elif action == "hardware-repair":
                    message = nodes.repair(self.plane.home, self.store, target)
                else:
                    raise RequestError(f"unknown chaos action {action!r}")
            except ValueError as error:  # ChaosError, or a bad signal name
                raise RequestError(str(error)) from None
        self.plane.waker.wake()
        return message

    def op_metrics(self) -> dict[str, object]:
        """Where the Prometheus metrics are served: ``{"url": ..., "problem": ...}``."""
        return self.plane.metrics

    def op_ui(self) -> dict[str, object]:
        """Where the job pages are served: ``{"url", "secret_url", "problem"}`` (``secret_url`` may act)."""
        return self.plane.ui

    def op_nodes(self) -> list[dict[str, Any]]:
        injected = self.plane.home.injected_faults
        return [
            {
                "name": n.name,
                "slots": n.slots,
                "ready": n.ready,
                "isolated": n.isolated,
                "injected": (injected / n.name).read_text().split() if (injected / n.name).is_file() else [],
            }
            for n in self.store.list_nodes()
        ]

    def op_node_release(self, node: str) -> str:
        """Release an isolated node (``trainguard node release``): pods may be placed there again."""
        with self.plane.lock:
            try:
                message = nodes.release(self.store, node)
            except ValueError as error:
                raise RequestError(str(error)) from None
        self.plane.waker.wake()
        return message

    def op_shutdown(self, stop_pods: bool = False) -> str:
        self._on_shutdown(stop_pods)
        return "control plane stopping"

    # ---- helpers -----------------------------------------------------------------------------------

    def _record(self, job: str) -> JobRecord:
        record = self.store.get_job(job)
        if record is None:
            names = ", ".join(r.name for r in self.store.list_jobs()) or "none"
            raise RequestError(f"no job {job!r} (jobs: {names})")
        return record

    def _view(self, record: JobRecord) -> dict[str, Any]:
        return job_view(record, self.store.list_pods(record.name))

    def _grace(self, pod: str) -> float:
        row = self.store.get_pod(pod)
        record = self.store.get_job(row.job) if row else None
        if row is None or record is None:
            return 30.0
        return grace_seconds(TrainingJob.model_validate(record.spec), row.role)

    @staticmethod
    def _check_runnable(job: TrainingJob, source: str) -> None:
        try:
            for role in job.spec.replica_specs:
                command(job, role)
            check_runnable(job)
        except ValueError as error:
            raise RequestError(f"{source}: {error}" if source else str(error)) from None

    def _free_port(self) -> int:
        """A loopback port for the job's rendezvous, free now and not given to another job."""
        taken = self.store.used_ports()
        for _ in range(50):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("127.0.0.1", 0))
                port = int(probe.getsockname()[1])
            if port not in taken:
                return port
        raise RequestError("no free loopback port for the job's rendezvous", exit_code=1)

    def _check_size(
        self,
        record: JobRecord,
        current: TrainingJob,
        job: TrainingJob,
        what: str,
        scaled: dict[str, int] | None = None,
    ) -> None:
        """A started job is never made larger than the local runtime runs (a job not started yet may be: it
        waits until it fits). ``job``: the job as it would be; ``scaled``: role -> its new size."""
        if not capacity.started(record):
            return
        desired = capacity.desired(record, current)
        sizes = {
            role: spec.replicas
            if spec.replicas != current.spec.replica_specs[role].replicas
            else desired[role]
            for role, spec in job.spec.replica_specs.items()
        }
        sizes.update(scaled or {})
        over = oversize(job, self.plane.limit, sizes)
        if over is not None:
            raise RequestError(
                f"{what}: the job would have {over.pods:,} pods; the local runtime runs at most "
                f"{self.plane.max_pods:,} pods of a job ({capacity.ENV_MAX_PODS}): choose fewer; "
                "the job is unchanged"
            )

    def _ensure_capacity(self, job: TrainingJob, role: str, replicas: int) -> None:
        record = self.store.get_job(job.name)
        if record is not None and record.nodes_wanted is None:
            current = sum(1 for row in self.store.list_pods(job.name) if row.role == role and row.alive)
            capacity.ensure_free(self.store, max(0, replicas - current))


def _validated(spec: dict[str, Any], source: str) -> TrainingJob:
    try:
        return TrainingJob.model_validate(spec)
    except ValidationError as error:
        first = error.errors()[0]
        path = ".".join(str(part) for part in first["loc"])
        raise RequestError(f"{source or 'job'}: {path}: {first['msg']}") from None
    except SpecError as error:
        raise RequestError(str(error)) from None


def _role(job: TrainingJob, role: str) -> str:
    for name in job.spec.replica_specs:
        if name == role or name.lower() == role.lower():
            return name
    raise RequestError(f"job {job.name} has no role {role!r} (roles: {', '.join(job.spec.replica_specs)})")


def _unknown_pod(pod: str, names: list[str]) -> str:
    return f"no pod {pod!r} (pods: {', '.join(names) or 'none'})"

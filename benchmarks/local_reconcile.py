"""One reconcile of a job at the largest size the job model allows, on the local runtime's control plane.

    python benchmarks/local_reconcile.py [--replicas 100000] [--passes 3]

Builds a control plane (the daemon's ``ControlPlane`` and its SQLite store in a temporary home; no daemon, no
socket) and gives it one job of ``--replicas`` pods (default: the most the job model allows). It times:

- ``submit``: the request ``trainguard run --detach`` sends. Past the local runtime's pod limit
  (``TRAINGUARD_MAX_PODS``) the job is held: accepted, not reconciled until it fits;
- ``held_pass``: one pass of the control plane's loop over that held job;
- ``first_pass``, ``passes``: the job let through all the same (the limit raised to its size), with no free
  slot anywhere (its nodes made full), so no pod is placed and no process started: the first reconcile
  (every pod slot created, every pod queued) and the next ``--passes`` ones (the steady cost of a job whose
  pods cannot be placed);
- ``request_wait``: how long a request that needs the control plane's lock (a ``scale``) waits when it
  arrives during such a pass (it waits for that one job's reconcile, never for a pass over all jobs);
- ``delete``, ``pass_after_delete``: deleting it, and the pass that forgets it.

The last line printed is one JSON object with the times in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainguard.api.model import MAX_REPLICAS  # noqa: E402
from trainguard.backends.local.clock import Clock  # noqa: E402
from trainguard.backends.local.home import Home  # noqa: E402
from trainguard.backends.local.plane import ControlPlane  # noqa: E402
from trainguard.backends.local.records import NodeRecord  # noqa: E402
from trainguard.backends.local.service import Service  # noqa: E402
from trainguard.backends.local.store import Store  # noqa: E402
from trainguard.controller.admission import MACHINE, is_held  # noqa: E402
from trainguard.controller.status import JobStatus  # noqa: E402


def job(name: str, replicas: int, low: int | None = None, high: int | None = None) -> dict[str, Any]:
    worker: dict[str, Any] = {
        "replicas": replicas,
        "restartPolicy": "OnFailure",
        "template": {"spec": {"containers": [{"name": "main", "command": ["sleep", "600"]}]}},
    }
    if low is not None:
        worker.update(minReplicas=low, maxReplicas=high)
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"replicaSpecs": {"worker": worker}},
    }


def timed(what: Any) -> float:
    started = time.perf_counter()
    what()
    return round(time.perf_counter() - started, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=MAX_REPLICAS)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tg-bench-") as root:
        home = Home(Path(root) / "home").ensure()
        store = Store(home.state_db)
        plane = ControlPlane(home, store, Clock(), {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        service = Service(plane, lambda with_pods: None)
        figures: dict[str, Any] = {"replicas": args.replicas, "max_pods": plane.max_pods}
        figures["submit"] = timed(lambda: service.op_submit(job("big", args.replicas), root))
        figures["nodes"] = len(store.list_nodes())
        for node in store.list_nodes():  # no room anywhere: no pod is placed, no process started
            store.update_node(NodeRecord(node.name, 0, node.ready, node.version))
        figures["held"] = args.replicas > plane.max_pods
        if figures["held"]:
            figures["held_pass"] = timed(plane.step)
            held = store.get_job("big")
            assert held is not None
            assert is_held(JobStatus.from_dict(held.status), MACHINE)
            # The same job let through, as if the limit were its size.
            store.update_status("big", {}, held.status_version)
            plane.max_pods = args.replicas
        figures["first_pass"] = timed(plane.step)
        figures["passes"] = [timed(plane.step) for _ in range(args.passes)]
        record = store.get_job("big")
        figures["status_pods"] = len(record.status.get("pods", [])) if record else None
        figures["pod_rows"] = len(store.list_pods("big"))
        figures["spawned"] = sum(1 for row in store.list_pods() if row.pid is not None)
        # A request that needs the lock, sent while such a pass runs: it waits for that job's reconcile.
        waits: list[float] = []

        def request() -> None:
            time.sleep(0.5)  # inside the pass
            waits.append(timed(lambda: service.op_scale("big", "worker", args.replicas)))

        thread = threading.Thread(target=request)
        thread.start()
        figures["pass_with_request"] = timed(plane.step)
        thread.join()
        figures["request_wait"] = waits[0] if waits else None
        figures["delete"] = timed(lambda: service.op_delete("big"))
        figures["pass_after_delete"] = timed(plane.step)
        figures["forgotten"] = store.get_job("big", include_deleted=True) is None
        plane.stop_all_pods()
        store.close()
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())

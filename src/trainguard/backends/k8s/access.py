"""The job's own access to the API, for the job barrier its pods run (CCE's launcher waits in an init container
until its trainers are up; ``trainguard.backends.k8s.barrier``): a ServiceAccount, a Role that reads the
namespace's pods, and the RoleBinding between them, all owned by the job."""

from __future__ import annotations

from trainguard.api import TrainingJob
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.metadata import Obj, object_meta

#: What CCE's job barrier is told to wait for; a template whose init container has it runs a barrier.
BARRIER_FLAG = "--barrier_roles"
#: CCE's job-barrier image, as its templates name it (any tag): the operator's ``--barrier-image`` replaces it.
CCE_BARRIER_REPOSITORY = "registry.baidubce.com/cce-plugin-dev/jobbarrier"
#: How a barrier image that is not CCE's (the operator's own) runs the barrier, with the template's args.
BARRIER_COMMAND = ("trainguard", "barrier")


def is_cces_barrier(container: Obj) -> bool:
    """An init container that runs CCE's job barrier image by its entrypoint (args only, CCE's templates)."""
    image = str(container.get("image") or "")
    repository = image.split("@", 1)[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return repository == CCE_BARRIER_REPOSITORY and not container.get("command")


def barrier_roles(job: TrainingJob) -> set[str]:
    """The roles whose pods run a job barrier in an init container (CCE's launcher)."""
    found = set()
    for role, spec in job.spec.replica_specs.items():
        for container in (spec.template.get("spec") or {}).get("initContainers") or []:
            words = [
                str(word) for word in [*(container.get("command") or []), *(container.get("args") or [])]
            ]
            if any(word == BARRIER_FLAG or word.startswith(BARRIER_FLAG + "=") for word in words):
                found.add(role)
    return found


def needs_pod_access(job: TrainingJob) -> bool:
    return bool(barrier_roles(job))


def access_name(job: TrainingJob) -> str:
    """The job's own ServiceAccount, Role and RoleBinding: read access to pods, for its barrier."""
    return f"{job.name}-barrier"


def access_objects(kind: JobKind, job: TrainingJob) -> list[Obj]:
    """The ServiceAccount of the barrier's pods (those that name none of their own), the Role that lets it
    list the namespace's pods (what the barrier reads, nothing else), and the RoleBinding that gives it to
    every service account the barrier's pods run as. All owned by the job, so removed with it."""
    name = access_name(job)
    namespace = job.metadata.namespace
    accounts = sorted(
        {
            (job.role(role).template.get("spec") or {}).get("serviceAccountName") or name
            for role in barrier_roles(job)
        }
    )
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_meta(kind, job, name, {})},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": object_meta(kind, job, name, {}),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": object_meta(kind, job, name, {}),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": namespace} for account in accounts
            ],
        },
    ]

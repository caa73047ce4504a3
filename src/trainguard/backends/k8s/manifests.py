"""The pod of each launch, as the operator creates it: the role's template with the launch spec the controller
decided (``trainguard.controller.launchspec``: command, environment, rank, world, as for the local runtime),
the agent delivered into it, and the volumes its agent and command read (nudges, the report token, memory
snapshots, Horovod's host discovery, the ssh keys). Every object the operator creates carries the job's labels
and an owner reference (``trainguard.backends.k8s.metadata``), so deleting the job deletes it (garbage
collection), and a restarted operator finds it again by label.

The job's other objects have modules of their own: its Services and the addresses they give (``services``),
the rendezvous store's pod and Service (``rendezvous``), the barrier's ServiceAccount, Role and RoleBinding
(``access``), the Horovod discovery ConfigMap (``discovery``), the ssh Secret (``ssh``), the PodGroup
(``gang``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from urllib.parse import urljoin

from trainguard.api import FrameworkType, TrainingJob
from trainguard.backends.k8s import discovery, gang, ssh
from trainguard.backends.k8s.access import (
    BARRIER_COMMAND,
    access_name,
    barrier_roles,
    is_cces_barrier,
    needs_pod_access,
)
from trainguard.backends.k8s.delivery import DEFAULT_AGENT_IMAGE, AgentDelivery, deliver_agent, entry
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.metadata import LABEL_GENERATION, LABEL_INDEX, LABEL_ROLE, Obj, object_meta
from trainguard.backends.k8s.services import service_name
from trainguard.controller.agent_options import agent_options
from trainguard.controller.backend import IsolationMode, LaunchPod
from trainguard.pod import contract
from trainguard.policy.fencing import Fencing

ANNOTATION_IN_PLACE = "trainguard.io/in-place-restarts"
#: The agent's summary of its pod (hangs, restarts in place, worker restarts), written by the operator's
#: agent-report endpoint (``trainguard.backends.k8s.agentreports``).
ANNOTATION_AGENT_REPORT = "trainguard.io/agent-report"
#: Shared memory of the pod for ``trainguard.Snapshots`` (an emptyDir in memory): it outlives the training
#: process and its restarts inside the pod, not the pod; the peer's copy covers a pod or node lost.
SNAPSHOT_DIR = "/trainguard-snapshots"
#: The files the operator gives a pod's agent, in one projected volume at ``POD_FILES_DIR``: a service-account
#: token for the operator's audience, which the agent shows when it reports (``REPORT_TOKEN_FILE``); the nudge
#: and the release (``NUDGE_FILE``, ``RELEASE_FILE``), each one of the pod's annotations, empty while it is absent.
POD_FILES_VOLUME = "trainguard-pod"
POD_FILES_DIR = "/etc/trainguard/pod"
REPORT_TOKEN_FILE = f"{POD_FILES_DIR}/token"
REPORT_AUDIENCE = "trainguard"
#: The agents' lease renewals (fencing, ``trainguard.backends.k8s.agentreports``), served next to the reports:
#: the report URL with its last segment replaced.
LEASE_PATH = "/v1/agent-lease"
#: ``<token> <unix time>`` of a failed peer (the controller's ``NudgeSurvivors``), projected into ``NUDGE_FILE``.
ANNOTATION_NUDGE = "trainguard.io/nudge"
NUDGE_FILE = f"{POD_FILES_DIR}/nudge"
#: ``<token> <address>[,<address>...]`` of a lost peer (the controller's ``ReleaseSurvivors``), projected into
#: ``RELEASE_FILE`` for the agent of each pod of a Horovod job.
ANNOTATION_RELEASE = "trainguard.io/release"
RELEASE_FILE = f"{POD_FILES_DIR}/release"
#: A test aid (the operator's ``--fault-injection``): every pod mounts this ConfigMap of its namespace, if it
#: exists, at ``FAULT_INJECT_DIR``; its key ``<node>`` lists the check items that read as faulty on that node
#: (``trainguard chaos hardware-fault NODE --kubeconfig ...``), as the agent reads ``contract.ENV_FAULT_INJECT``.
FAULT_INJECT_CONFIG_MAP = "trainguard-fault-injection"
FAULT_INJECT_DIR = "/etc/trainguard/fault-injection"
#: The job's ssh Secret (``ssh.secret``), by the name backend.py calls it.


@dataclass(frozen=True)
class PodSettings:
    """How the operator dresses every pod it creates."""

    #: Replaces the templates' schedulerName (e.g. when they name a scheduler the cluster lacks).
    scheduler: str | None = None
    #: The image whose ``IMAGE_AGENT_ROOT`` each pod gets: the agent's (``delivery.DEFAULT_AGENT_IMAGE``).
    agent_image: str = DEFAULT_AGENT_IMAGE
    #: How (``trainguard.backends.k8s.delivery``): ``AUTO`` is resolved by the operator against its nodes
    #: (``Shared.pod_settings``); where it is not, pods get the init container.
    agent_delivery: AgentDelivery = AgentDelivery.INIT_CONTAINER
    #: Where the agents POST what happens inside their pods (the operator's agent-report endpoint, reachable
    #: from the pods); None: they report nothing but their end.
    report_url: str | None = None
    #: Release the survivors of a lost Horovod host (``trainguard.controller.release``): the pods of Horovod
    #: jobs get the release file their agent watches. Off: they wait for Gloo's timeout, as without trainguard.
    release_survivors: bool = True
    #: The PriorityClass of a pod issued again after a failed fault tolerance check (``LaunchPod.first_in_line``):
    #: ahead of the scheduler's queue (the chart's has ``preemptionPolicy: Never``: it evicts nobody).
    reissue_priority_class: str | None = None
    #: Whose fault tolerance checks may isolate a node (taint, label, Node Event): a job's, for the node its pod
    #: was bound to, within the check's bounds (the default); only the node checker's (``--isolation-mode
    #: node-checker``); none (``--no-isolation``). Pods of failed checks are issued again elsewhere in each.
    isolation: IsolationMode = IsolationMode.AGENTS
    #: A test aid, off by default: every pod mounts the ``FAULT_INJECT_CONFIG_MAP`` (optional: pods start
    #: without it), and its agent reads the check items injected on its node there.
    fault_injection: bool = False
    #: Fencing (``trainguard.policy.fencing``, the operator's ``--fence-seconds``): every pod's agent ends its
    #: workers past its bound without a renewal at ``lease_url(report_url)``, and the replacement of a pod on a
    #: node that is not Ready waits ``fencing.seconds``. Needs ``report_url``; None: off.
    fencing: Fencing | None = None
    #: The image that runs CCE's job barrier in its place (``trainguard barrier``, with the template's args):
    #: the operator's own (the chart's default), so that CCE's templates run where CCE's registry is not
    #: reachable. None: CCE's image as the template names it.
    barrier_image: str | None = None


def pod(kind: JobKind, job: TrainingJob, launch: LaunchPod, settings: PodSettings) -> Obj:
    """The pod of one launch: the role's template with the launch's spec (command under the agent, the
    environment before the container's own), Kubernetes restarts off (trainguard decides restarts), spread
    away from the nodes the launch avoids.

    The agent is delivered, not expected in the image: an init container copies it in, and the command runs
    through ``trainguard-entry run``, which looks for python3 in the image and starts the agent with it, or the
    command as written where the image has none (it tells the operator why, which warns)."""
    spec_of_role = job.role(launch.role)
    template = copy.deepcopy(spec_of_role.template)
    meta = template.get("metadata") or {}
    spec: Obj = template.get("spec") or {}
    labels = {
        **{str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        LABEL_ROLE: launch.role,
        LABEL_INDEX: str(launch.index),
        LABEL_GENERATION: str(launch.generation),
    }
    metadata = object_meta(kind, job, launch.pod, labels)
    metadata["annotations"] = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    if gang.scheduler_of(job, settings.scheduler):
        metadata["annotations"][gang.ANNOTATION_GROUP] = gang.group_name(job)
    _job_env_in_init_containers(spec, launch)
    if settings.barrier_image:
        _barrier_image(spec, settings.barrier_image)
    if needs_pod_access(job) and launch.role in barrier_roles(job) and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = access_name(job)
    spec["restartPolicy"] = "Never"
    spec["hostname"] = launch.pod
    spec["subdomain"] = service_name(job)
    if settings.scheduler:
        spec["schedulerName"] = settings.scheduler
    if launch.first_in_line and settings.reissue_priority_class:
        spec["priorityClassName"] = settings.reissue_priority_class
        spec.pop("priority", None)  # the admission controller sets it from the class
    containers = spec.get("containers") or [{"name": "main"}]
    spec["containers"] = containers
    first = containers[0]
    argv = list(launch.spec.argv)
    # Under the agent, trainguard's own variables go on its command line and it sets them for the command.
    carried: list[tuple[str, str]] = []
    ours: list[Obj] = []
    for name, value in launch.spec.env:
        if argv and contract.carried_by_agent(name):
            carried.append((name, value))
        else:
            ours.append({"name": name, "value": value})
    # The node the API server bound the pod to, as the agent's checks name it (and the SDK's buddy).
    ours.append({"name": contract.ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    # Kubernetes takes the last of equal names: the container's own variables win, as on the local runtime.
    first["env"] = [*ours, *(first.get("env") or [])]
    # The agent of a pod in the rendezvous hears of its peers' failures (the controller's nudges).
    nudge = ["--nudge-file", NUDGE_FILE] if launch.spec.in_rendezvous else []
    # The agent of a pod of a Horovod job closes its processes' connections to a lost peer (releases).
    releases = settings.release_survivors and job.spec.framework_type is FrameworkType.HOROVOD
    release = ["--release-file", RELEASE_FILE] if releases else []
    report = (
        ["--report-url", settings.report_url, "--report-token", REPORT_TOKEN_FILE]
        if settings.report_url
        else []
    )
    fencing = settings.fencing if settings.report_url else None
    lease = (
        ["--lease-url", lease_url(settings.report_url)] if fencing is not None and settings.report_url else []
    )
    if argv:
        carried += _mount_snapshots(spec, first)
        # The agent writes its final report (exit, or gave-up with reason Hang) to the termination message.
        options = [
            *agent_options(job, launch.role, fencing),
            *nudge,
            *release,
            *report,
            *lease,
            *(f"--env={name}={value}" for name, value in carried),
        ]
        first["command"] = [entry(settings.agent_delivery), "run", *options, "--", *argv]
        first.pop("args", None)
        deliver_agent(spec, first, settings.agent_image, settings.agent_delivery)
        _mount_pod_files(spec, first, token=bool(report), nudge=bool(nudge), release=bool(release))
        if settings.fault_injection:
            _mount_fault_injection(spec, first)
    if job.spec.framework_type is FrameworkType.HOROVOD:
        discovery.mount(job, spec, first)
    if ssh.wants_ssh(job):
        ssh.mount(spec, first, job)
        if launch.spec.horovod_host:
            ssh.readiness_probe(first)
    if launch.avoid_nodes:
        _avoid(spec, launch.avoid_nodes)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _job_env_in_init_containers(spec: Obj, launch: LaunchPod) -> None:
    """The template's init containers see the job as its containers do (``TRAININGJOB_*``: CCE's barrier takes
    ``--name=$(TRAININGJOB_NAME)``), and the roles' sizes (``TRAINGUARD_ROLE_SIZES``, what the barrier waits
    for); their own variables come after and win."""
    ours = [
        {"name": name, "value": value} for name, value in launch.spec.env if name.startswith("TRAININGJOB_")
    ]
    ours.append(
        {"name": contract.ENV_ROLE_SIZES, "value": ",".join(f"{r}={n}" for r, n in launch.spec.role_sizes)}
    )
    for container in spec.get("initContainers") or []:
        container["env"] = [*ours, *(container.get("env") or [])]


def _barrier_image(spec: Obj, image: str) -> None:
    """CCE's job barrier run by ``image`` (``trainguard barrier`` takes its flags): its init containers that
    name CCE's image and no command."""
    for container in spec.get("initContainers") or []:
        if is_cces_barrier(container):
            container["image"] = image
            container["command"] = list(BARRIER_COMMAND)


def _mount_pod_files(spec: Obj, container: Obj, token: bool, nudge: bool, release: bool) -> None:
    """The agent's files, in one projected volume at ``POD_FILES_DIR`` (none where it needs none of them).

    ``token``: a token of the pod's service account for the operator's audience only (the kubelet renews it):
    the operator learns from it which pod reports; it grants nothing on the API server. ``nudge``, ``release``:
    the pod's annotation of each as a file for the agent (empty while the annotation is absent), which the
    kubelet rewrites when it syncs the pod after the operator's patch (seconds), at the latest on its periodic
    sync (about a minute)."""
    items = [
        {"path": path.rsplit("/", 1)[1], "fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}
        for wanted, path, annotation in (
            (nudge, NUDGE_FILE, ANNOTATION_NUDGE),
            (release, RELEASE_FILE, ANNOTATION_RELEASE),
        )
        if wanted
    ]
    sources: list[Obj] = []
    if token:
        audience = {"audience": REPORT_AUDIENCE, "expirationSeconds": 3600, "path": "token"}
        sources.append({"serviceAccountToken": audience})
    if items:
        sources.append({"downwardAPI": {"items": items}})
    if not sources:
        return
    volume = {"name": POD_FILES_VOLUME, "projected": {"sources": sources}}
    spec["volumes"] = [*(spec.get("volumes") or []), volume]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": POD_FILES_VOLUME, "mountPath": POD_FILES_DIR, "readOnly": True},
    ]


def _mount_snapshots(spec: Obj, container: Obj) -> list[tuple[str, str]]:
    """A memory-backed emptyDir for the snapshots of ``trainguard.Snapshots``, and the variable that names it
    (``TRAINGUARD_SNAPSHOT_DIR``, for the agent to set), unless the container names a directory of its own.
    Empty, it costs nothing; what the script keeps there counts towards the container's memory, as any memory
    it uses."""
    if any(item.get("name") == contract.ENV_SNAPSHOT_DIR for item in container.get("env") or []):
        return []
    volume = "trainguard-snapshots"
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": volume, "emptyDir": {"medium": "Memory"}}]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": volume, "mountPath": SNAPSHOT_DIR},
    ]
    return [(contract.ENV_SNAPSHOT_DIR, SNAPSHOT_DIR)]


def _mount_fault_injection(spec: Obj, container: Obj) -> None:
    """The test aid's ConfigMap (``FAULT_INJECT_CONFIG_MAP``), optional: a pod starts whether or not it exists,
    and kubelet brings its changes within about a minute (what a periodic check sees)."""
    volume = "trainguard-fault-injection"
    source = {"name": FAULT_INJECT_CONFIG_MAP, "optional": True}
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": volume, "configMap": source}]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": volume, "mountPath": FAULT_INJECT_DIR, "readOnly": True},
    ]
    container["env"] = [
        {"name": contract.ENV_FAULT_INJECT, "value": FAULT_INJECT_DIR},
        *(container.get("env") or []),
    ]


def lease_url(report_url: str) -> str:
    """Where the agents renew their leases: beside the report endpoint, whatever prefix its URL has."""
    return urljoin(report_url, LEASE_PATH.rsplit("/", 1)[1])


def _avoid(spec: Obj, nodes: tuple[str, ...]) -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": list(nodes)}]}
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    # Terms are ORed: the exclusion has to be part of every one of them.
    for existing in terms:
        existing.setdefault("matchFields", []).extend(term["matchFields"])
    required["nodeSelectorTerms"] = terms

"""What the operator creates for a job: its pods, a headless Service, a ConfigMap with the Horovod
host-discovery script, and for a PyTorch job the rendezvous store (a pod and its ClusterIP Service). Every
object carries the job's labels and an owner reference, so deleting the job deletes them (garbage
collection), and so a restarted operator finds them again by label.

Each pod renders the launch spec the controller decided (``trainguard.controller.launchspec``: command,
environment, rank, world, as for the local runtime). A PyTorch job's pods run torchrun's elastic agent in
one c10d rendezvous at ``<job>-rdzv.<namespace>.svc:29400``: a Service in front of the pod ``<job>-rendezvous``, which serves only the store (``trainguard.rendezvous_store``).
Every agent is a client of it (``is_host=false``), so losing any worker pod never loses the rendezvous.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from trainguard._version import __version__
from trainguard.api import FrameworkType, TrainingJob
from trainguard.backends.k8s import gang, ssh
from trainguard.backends.k8s.kinds import JobKind
from trainguard.controller import torchrun_command
from trainguard.controller.agent_options import agent_options
from trainguard.controller.backend import LaunchPod
from trainguard.controller.launchspec import DEFAULT_MASTER_PORT, Network

Obj = dict[str, Any]

LABEL_JOB = "trainguard.io/job"
LABEL_ROLE = "trainguard.io/role"
LABEL_INDEX = "trainguard.io/index"
LABEL_GENERATION = "trainguard.io/generation"
#: On pods: the kind of the job that owns them (so one watch serves every kind).
LABEL_KIND = "trainguard.io/kind"
ANNOTATION_IN_PLACE = "trainguard.io/in-place-restarts"
#: The agent's summary of its pod (hangs, restarts in place, worker restarts), written by the operator's
#: agent-report endpoint (``trainguard.backends.k8s.agentreports``).
ANNOTATION_AGENT_REPORT = "trainguard.io/agent-report"
#: Shared memory of the pod for ``trainguard.Snapshots`` (an emptyDir in memory): it outlives the training
#: process and its restarts inside the pod, not the pod; the peer's copy covers a pod or node lost.
SNAPSHOT_DIR = "/trainguard-snapshots"
ENV_SNAPSHOT_DIR = "TRAINGUARD_SNAPSHOT_DIR"
#: A service-account token for the operator's audience, which the agent shows when it reports.
REPORT_TOKEN_DIR = "/var/run/secrets/trainguard.io"
REPORT_TOKEN_FILE = f"{REPORT_TOKEN_DIR}/token"
REPORT_AUDIENCE = "trainguard"
#: ``<token> <unix time>`` of a failed peer (the controller's ``NudgeSurvivors``), projected into ``NUDGE_FILE``.
ANNOTATION_NUDGE = "trainguard.io/nudge"
NUDGE_DIR = "/etc/trainguard/nudge"
NUDGE_FILE = f"{NUDGE_DIR}/token"
DISCOVERY_KEY = "discover_hosts.sh"
DISCOVERY_DIR = "/etc/edl"
#: Where the operator's image keeps what pods need (``deploy/Dockerfile``): ``bin/trainguard-entry`` and
#: ``lib/`` (the agent's modules, standard library only).
IMAGE_AGENT_ROOT = "/opt/trainguard"
#: Where every pod finds its copy: an emptyDir the install init container fills.
AGENT_ROOT = "/trainguard"
AGENT_VOLUME = "trainguard-agent"
#: The static program the pod's commands run through (``entry/``): it needs nothing of the image.
ENTRY = f"{AGENT_ROOT}/bin/trainguard-entry"
#: Init containers: the first copies the agent in (the operator's image), the second looks for python3 in the
#: pod's own image and says what it found in its termination message (``trainguard-entry probe``).
INSTALL_CONTAINER = "trainguard-install"
PROBE_CONTAINER = "trainguard-probe"
#: The image whose ``IMAGE_AGENT_ROOT`` the pods get: the operator's own (the Helm chart's default).
DEFAULT_AGENT_IMAGE = f"ghcr.io/trainguard/operator:{__version__}"
_INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}}
#: On the rendezvous store's pod and Service (replica pods have none): what they are.
LABEL_COMPONENT = "trainguard.io/component"
RENDEZVOUS = "rendezvous"
RENDEZVOUS_PORT = 29400
RENDEZVOUS_MODULE = "trainguard.rendezvous_store"
#: Services are DNS-1035 labels.
_MAX_SERVICE_NAME = 63


@dataclass(frozen=True)
class PodSettings:
    """How the operator dresses every pod it creates."""

    #: Replaces the templates' schedulerName (e.g. when they name a scheduler the cluster lacks).
    scheduler: str | None = None
    #: The image the agent is copied from into each pod (``IMAGE_AGENT_ROOT``): the operator's own.
    agent_image: str = DEFAULT_AGENT_IMAGE
    #: Where the agents POST what happens inside their pods (the operator's agent-report endpoint, reachable
    #: from the pods); None: they report nothing but their end.
    report_url: str | None = None


def job_selector(job_name: str) -> str:
    return f"{LABEL_JOB}={job_name}"


def service_name(job: TrainingJob) -> str:
    return job.name


def discovery_name(job: TrainingJob) -> str:
    return f"{job.name}-discovery"


def rendezvous_service_name(job: TrainingJob) -> str:
    """``<job>-rdzv``; a name past 63 characters is cut and made unique with a digest of the job's name."""
    name = f"{job.name}-rdzv"
    if len(name) <= _MAX_SERVICE_NAME:
        return name
    digest = hashlib.sha256(job.name.encode()).hexdigest()[:8]
    return f"{job.name[: _MAX_SERVICE_NAME - len(digest) - 6]}-{digest}-rdzv"


def rendezvous_pod_name(job: TrainingJob) -> str:
    return f"{job.name}-{RENDEZVOUS}"


def rendezvous_endpoint(job: TrainingJob) -> str:
    """The store's address as the agents use it: the Service's DNS name, found through the pods' search path."""
    return f"{rendezvous_service_name(job)}.{job.metadata.namespace}.svc:{RENDEZVOUS_PORT}"


def hosts_rendezvous(job: TrainingJob) -> bool:
    """Whether trainguard runs a rendezvous store for the job: torchrun's c10d rendezvous, with no
    ``rdzvHost`` of the job's own, and some role whose pods join it."""
    rdzv = torchrun_command.rendezvous(job, rendezvous_endpoint(job))
    return rdzv is not None and rdzv.hosted and bool(torchrun_command.torchrun_roles(job))


def is_rendezvous(pod: Obj) -> bool:
    return (pod.get("metadata", {}).get("labels") or {}).get(LABEL_COMPONENT) == RENDEZVOUS


def owner_reference(kind: JobKind, job: TrainingJob) -> Obj:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": job.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(kind: JobKind, job: TrainingJob, name: str, labels: dict[str, str]) -> Obj:
    return {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": {LABEL_JOB: job.name, LABEL_KIND: kind.kind, **labels},
        "ownerReferences": [owner_reference(kind, job)],
    }


def network(job: TrainingJob) -> Network:
    """Where the job's pods find each other: the rendezvous Service, and each pod's name behind the job's
    headless Service."""
    return Network(
        rendezvous_endpoint=rendezvous_endpoint(job),
        pod_address=f"{{pod}}.{service_name(job)}",
        master_port=DEFAULT_MASTER_PORT,
    )


def pod(kind: JobKind, job: TrainingJob, launch: LaunchPod, settings: PodSettings) -> Obj:
    """The pod of one launch: the role's template with the launch's spec (command under the agent, the
    environment before the container's own), Kubernetes restarts off (trainguard decides restarts), spread
    away from the nodes the launch avoids.

    The agent is delivered, not expected in the image: init containers copy it in and look for python3 there,
    and the command runs through ``trainguard-entry run``, which starts the agent with the image's python, or
    the command as written where the image has none (the probe's message says so, and the operator warns)."""
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
    metadata = _meta(kind, job, launch.pod, labels)
    metadata["annotations"] = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    if gang.scheduler_of(job, settings.scheduler):
        metadata["annotations"][gang.ANNOTATION_GROUP] = gang.group_name(job)
    _job_env_in_init_containers(spec, launch)
    if needs_pod_access(job) and launch.role in barrier_roles(job) and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = access_name(job)
    spec["restartPolicy"] = "Never"
    spec["hostname"] = launch.pod
    spec["subdomain"] = service_name(job)
    if settings.scheduler:
        spec["schedulerName"] = settings.scheduler
    containers = spec.get("containers") or [{"name": "main"}]
    spec["containers"] = containers
    first = containers[0]
    ours = [{"name": name, "value": value} for name, value in launch.spec.env]
    # Kubernetes takes the last of equal names: the container's own variables win, as on the local runtime.
    first["env"] = [*ours, *(first.get("env") or [])]
    argv = list(launch.spec.argv)
    # The agent of a pod in the rendezvous hears of its peers' failures (the controller's nudges).
    nudge = ["--nudge-file", NUDGE_FILE] if launch.spec.in_rendezvous else []
    report = (
        ["--report-url", settings.report_url, "--report-token", REPORT_TOKEN_FILE]
        if settings.report_url
        else []
    )
    if argv:
        # The agent writes its final report (exit, or gave-up with reason Hang) to the termination message.
        first["command"] = [ENTRY, "run", *agent_options(job, launch.role), *nudge, *report, "--", *argv]
        first.setdefault("terminationMessagePath", "/dev/termination-log")
        first.pop("args", None)
        _deliver_agent(spec, first, settings, probe=True)
        if nudge:
            _mount_nudge(spec, first)
        if report:
            _mount_report_token(spec, first)
        _mount_snapshots(spec, first)
    if job.spec.framework_type is FrameworkType.HOROVOD:
        _mount_discovery(job, spec, first)
    if ssh.wants_ssh(job):
        ssh.mount(spec, first, job)
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
    ours.append({"name": ENV_ROLE_SIZES, "value": ",".join(f"{r}={n}" for r, n in launch.spec.role_sizes)})
    for container in spec.get("initContainers") or []:
        container["env"] = [*ours, *(container.get("env") or [])]


#: What CCE's job barrier is told to wait for; a template whose init container has it runs a barrier.
BARRIER_FLAG = "--barrier_roles"
#: Where the barrier learns how many pods each role has now (``trainguard.backends.k8s.barrier``).
ENV_ROLE_SIZES = "TRAINGUARD_ROLE_SIZES"


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
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(kind, job, name, {})},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(kind, job, name, {}),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(kind, job, name, {}),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": namespace} for account in accounts
            ],
        },
    ]


def _deliver_agent(spec: Obj, container: Obj, settings: PodSettings, probe: bool) -> None:
    """An emptyDir at ``AGENT_ROOT`` for ``container``, filled by an init container from the operator's image
    before the pod's own init containers run; with ``probe``, a second one in the container's image records
    whether it has a python3 the agent can use."""
    mount = {"name": AGENT_VOLUME, "mountPath": AGENT_ROOT}
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": AGENT_VOLUME, "emptyDir": {}}]
    ours: list[Obj] = [
        {
            "name": INSTALL_CONTAINER,
            "image": settings.agent_image,
            "imagePullPolicy": "IfNotPresent",
            "command": [f"{IMAGE_AGENT_ROOT}/bin/trainguard-entry", "install", AGENT_ROOT],
            "volumeMounts": [mount],
            "resources": _INIT_RESOURCES,
        }
    ]
    if probe:
        checker: Obj = {
            "name": PROBE_CONTAINER,
            "image": container.get("image", ""),
            "command": [ENTRY, "probe"],
            "volumeMounts": [mount],
            "resources": _INIT_RESOURCES,
        }
        # The same image as the container sees it: its pull policy, user, and a PATH of its own if it sets one.
        for key in ("imagePullPolicy", "securityContext", "workingDir"):
            if key in container:
                checker[key] = copy.deepcopy(container[key])
        path = [item for item in container.get("env") or [] if item.get("name") == "PATH"]
        if path:
            checker["env"] = copy.deepcopy(path[-1:])
        ours.append(checker)
    spec["initContainers"] = [*ours, *(spec.get("initContainers") or [])]
    container["volumeMounts"] = [*(container.get("volumeMounts") or []), {**mount, "readOnly": True}]


def _mount_discovery(job: TrainingJob, spec: Obj, container: Obj) -> None:
    volume = "trainguard-discovery"
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": volume, "configMap": {"name": discovery_name(job), "defaultMode": 0o755}},
    ]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": volume, "mountPath": DISCOVERY_DIR, "readOnly": True},
    ]


def _mount_nudge(spec: Obj, container: Obj) -> None:
    """The pod's nudge annotation as a file for the agent (empty while the annotation is absent); kubelet
    refreshes it on its sync, within about a minute of the operator's patch."""
    volume = "trainguard-nudge"
    item = {"path": "token", "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_NUDGE}']"}}
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": volume, "downwardAPI": {"items": [item]}}]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": volume, "mountPath": NUDGE_DIR, "readOnly": True},
    ]


def _mount_snapshots(spec: Obj, container: Obj) -> None:
    """A memory-backed emptyDir for the snapshots of ``trainguard.Snapshots``, named by
    ``TRAINGUARD_SNAPSHOT_DIR`` (unless the container names a directory of its own). Empty, it costs nothing;
    what the script keeps there counts towards the container's memory, as any memory it uses."""
    if any(item.get("name") == ENV_SNAPSHOT_DIR for item in container.get("env") or []):
        return
    volume = "trainguard-snapshots"
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": volume, "emptyDir": {"medium": "Memory"}}]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": volume, "mountPath": SNAPSHOT_DIR},
    ]
    container["env"] = [*(container.get("env") or []), {"name": ENV_SNAPSHOT_DIR, "value": SNAPSHOT_DIR}]


def _mount_report_token(spec: Obj, container: Obj) -> None:
    """A token of the pod's service account for the operator's audience only (the kubelet renews it): the
    operator learns from it which pod reports. It grants nothing on the API server."""
    volume = "trainguard-report-token"
    source = {
        "serviceAccountToken": {"audience": REPORT_AUDIENCE, "expirationSeconds": 3600, "path": "token"}
    }
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": volume, "projected": {"sources": [source]}}]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": volume, "mountPath": REPORT_TOKEN_DIR, "readOnly": True},
    ]


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


def service(kind: JobKind, job: TrainingJob) -> Obj:
    """Headless: every pod gets a DNS name ``<pod>.<job>.<namespace>.svc`` for rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(kind, job, service_name(job), {}),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: job.name},
        },
    }


def ssh_secret(kind: JobKind, job: TrainingJob) -> Obj:
    """The job's Secret for ``plugin.ssh``, with a fresh key pair (``trainguard.backends.k8s.ssh``)."""
    private, public = ssh.key_pair(f"trainguard-{job.metadata.namespace}-{job.name}")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(kind, job, ssh.secret_name(job), {}),
        "data": ssh.secret_data(job, private, public),
    }


def pod_group(kind: JobKind, job: TrainingJob, priority_class: str | None) -> Obj:
    """The job's PodGroup for its gang scheduler (``trainguard.backends.k8s.gang``)."""
    return {
        "apiVersion": gang.API_VERSION,
        "kind": "PodGroup",
        "metadata": _meta(kind, job, gang.group_name(job), {}),
        "spec": gang.pod_group_spec(job, priority_class),
    }


def discovery_script(version: int, hosts: tuple[str, ...]) -> str:
    lines = "\n".join(f"echo {host}" for host in hosts)
    return f"#!/bin/sh\n# trainguard host discovery, version {version}\n{lines}\n"


def horovod_host(job: TrainingJob, name: str, observed: Obj | None) -> str:
    """How a Horovod launcher names the worker pod ``name`` (``observed``: that pod as last seen) in its host
    list: by the pod's IP, which is new with every pod, so that Horovod takes a replaced pod for a new host.
    By name it would not: horovodrun blacklists a host whose worker failed, for good unless it is given
    ``--blacklist-cooldown-range`` (CCE's command is not), and a replaced pod keeps its name here (CCE's
    operator names each pod anew). By its DNS name behind the job's Service where the IP is not known yet, or
    is its node's (``hostNetwork``: pods on one node would be one host)."""
    pod = observed or {}
    ip = (pod.get("status") or {}).get("podIP")
    if ip and not (pod.get("spec") or {}).get("hostNetwork"):
        return str(ip)
    return network(job).address(name)


def discovery_config_map(kind: JobKind, job: TrainingJob, version: int, hosts: tuple[str, ...]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            **_meta(kind, job, discovery_name(job), {}),
            "annotations": {"trainguard.io/discovery-version": str(version)},
        },
        "data": {DISCOVERY_KEY: discovery_script(version, hosts)},
    }


def rendezvous_service(kind: JobKind, job: TrainingJob) -> Obj:
    """A ClusterIP Service in front of the store's pod: a stable address that outlives every pod."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(kind, job, rendezvous_service_name(job), {LABEL_COMPONENT: RENDEZVOUS}),
        "spec": {
            "selector": {LABEL_JOB: job.name, LABEL_COMPONENT: RENDEZVOUS},
            "ports": [
                {
                    "name": RENDEZVOUS,
                    "port": RENDEZVOUS_PORT,
                    "targetPort": RENDEZVOUS_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


#: What the store's pod takes from the first torchrun role's pod template: where it may run and pull from.
_PLACEMENT_FIELDS = ("imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName")


def rendezvous_pod(kind: JobKind, job: TrainingJob, settings: PodSettings) -> Obj:
    """The pod that serves the job's rendezvous store: the first torchrun role's image (it has torch, as the
    agent needs), no GPUs, kept away from the job's replicas where the cluster allows (losing a worker's node
    should not lose the store too). Its labels make it no replica: the controller never sees it."""
    role = torchrun_command.torchrun_roles(job)[0]
    template_spec: Obj = job.role(role).template.get("spec") or {}
    source: Obj = (template_spec.get("containers") or [{}])[0]
    container: Obj = {
        "name": "store",
        "image": source.get("image", ""),
        "command": [ENTRY, "python", "-m", RENDEZVOUS_MODULE, "--port", str(RENDEZVOUS_PORT)],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "ports": [{"name": RENDEZVOUS, "containerPort": RENDEZVOUS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": RENDEZVOUS_PORT}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
    }
    if "imagePullPolicy" in source:
        container["imagePullPolicy"] = source["imagePullPolicy"]
    replicas = {
        "labelSelector": {
            "matchExpressions": [
                {"key": LABEL_JOB, "operator": "In", "values": [job.name]},
                {"key": LABEL_INDEX, "operator": "Exists"},
            ]
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    spec: Obj = {
        **{key: copy.deepcopy(template_spec[key]) for key in _PLACEMENT_FIELDS if key in template_spec},
        # A crashed store restarts in place; a lost pod is created again by the operator.
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": replicas}
                ]
            }
        },
    }
    _deliver_agent(spec, container, settings, probe=False)
    if settings.scheduler:
        spec["schedulerName"] = settings.scheduler
    labels = {LABEL_ROLE: RENDEZVOUS, LABEL_COMPONENT: RENDEZVOUS}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(kind, job, rendezvous_pod_name(job), labels),
        "spec": spec,
    }

"""The Helm chart renders what docs/operator.md says it installs: the operator's Deployment handing the agent's
image to the pods (--agent-image), a Service in front of the metrics port, and Kubeflow's PyTorchJob CRD only
with pytorchjobs=true. Rendered by the helm the test cluster builds (``helm template``, no cluster needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.conftest import k8s_skipped, run_script
from trainguard.backends.k8s import isolation, manifests, nodechecker
from trainguard.pod import contract

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "trainguard"


def _render(*sets: str) -> dict[tuple[str, str], Any]:
    if k8s_skipped():
        pytest.skip("TRAINGUARD_SKIP_K8S=1: helm is built with the test cluster's binaries")
    node_bin = Path(run_script("build", "--node-binaries").split()[0])
    argv = [str(node_bin / "helm"), "template", "trainguard", str(CHART), "-n", "trainguard-system"]
    for value in sets:
        argv += ["--set", value]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout) if d}


def test_the_operator_hands_its_own_image_to_the_pods_and_serves_metrics_through_a_service() -> None:
    objects = _render()
    deployment = objects[("Deployment", "trainguard-operator")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/trainguard/operator:0.1.0"
    # The pods get the agent's own image (a few MB), of the operator's tag.
    assert "--agent-image=ghcr.io/trainguard/agent:0.1.0" in container["args"]
    assert "--agent-delivery=auto" in container["args"]
    assert deployment["spec"]["replicas"] == 2
    service = objects[("Service", "trainguard-operator-metrics")]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "metrics"
    assert {"name": "metrics", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert ("CustomResourceDefinition", "pytorchjobs.kubeflow.org") not in objects


def test_the_agents_report_to_the_operator_through_a_service_with_a_pod_bound_token() -> None:
    objects = _render()
    deployment = objects[("Deployment", "trainguard-operator")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    service = objects[("Service", "trainguard-operator-agent-reports")]
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (8081, "agent-reports")
    assert {"name": "agent-reports", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    url = "http://trainguard-operator-agent-reports.trainguard-system.svc:8081/v1/agent-report"
    for flag in ("--agent-report-port=8081", "--agent-report-address=0.0.0.0", f"--agent-report-url={url}"):
        assert flag in container["args"]
    rules = objects[("ClusterRole", "trainguard-operator")]["rules"]
    assert {
        "apiGroups": ["authentication.k8s.io"],
        "resources": ["tokenreviews"],
        "verbs": ["create"],
    } in rules


@pytest.mark.parametrize(
    ("values", "flag"), [((), "--fence-seconds=120"), (("fencing.seconds=45",), "--fence-seconds=45")]
)
def test_fencing_is_one_value_given_to_the_operator(values: tuple[str, ...], flag: str) -> None:
    (container,) = _render(*values)[("Deployment", "trainguard-operator")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert [arg for arg in container["args"] if arg.startswith("--fence-seconds")] == [flag]


@pytest.mark.parametrize(
    ("values", "image"),
    [
        (("agentImage.tag=1.2",), "ghcr.io/trainguard/agent:1.2"),
        (("agentImage.repository=ghcr.io/trainguard/operator",), "ghcr.io/trainguard/operator:0.1.0"),
    ],
)
def test_the_agents_image_may_be_named(values: tuple[str, ...], image: str) -> None:
    (container,) = _render(*values)[("Deployment", "trainguard-operator")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert [arg for arg in container["args"] if arg.startswith("--agent-image")] == [f"--agent-image={image}"]


@pytest.mark.parametrize("how", ["image-volume", "init-container"])
def test_the_agents_delivery_is_one_value_given_to_the_operator(how: str) -> None:
    (container,) = _render(f"agentDelivery={how}")[("Deployment", "trainguard-operator")]["spec"]["template"][
        "spec"
    ]["containers"]
    assert [arg for arg in container["args"] if arg.startswith("--agent-delivery")] == [
        f"--agent-delivery={how}"
    ]


def test_pytorchjobs_brings_kubeflows_crd_and_the_flag() -> None:
    objects = _render("pytorchjobs=true", "image.tag=dev")
    crd = objects[("CustomResourceDefinition", "pytorchjobs.kubeflow.org")]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    (version,) = crd["spec"]["versions"]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.pytorchReplicaSpecs.Worker.replicas"
    (container,) = objects[("Deployment", "trainguard-operator")]["spec"]["template"]["spec"]["containers"]
    assert "--pytorchjobs" in container["args"]
    assert "--agent-image=ghcr.io/trainguard/agent:dev" in container["args"]


def test_the_operator_may_isolate_nodes_and_fault_injection_is_off_unless_asked() -> None:
    objects = _render()
    rules = objects[("ClusterRole", "trainguard-operator")]["rules"]
    nodes = next(rule for rule in rules if rule["resources"] == ["nodes"])
    assert set(nodes["verbs"]) == {"get", "list", "watch", "patch"}
    events = next(rule for rule in rules if rule["resources"] == ["events"])
    assert "create" in events["verbs"]
    jobs = next(rule for rule in rules if rule["resources"] == ["trainingjobs", "aitrainingjobs"])
    assert set(jobs["verbs"]) == {"get", "list", "watch", "create", "patch"}  # create, patch: the job pages
    (container,) = objects[("Deployment", "trainguard-operator")]["spec"]["template"]["spec"]["containers"]
    assert "--fault-injection" not in container["args"]
    (container,) = _render("faultInjection=true")[("Deployment", "trainguard-operator")]["spec"]["template"][
        "spec"
    ]["containers"]
    assert "--fault-injection" in container["args"]


def test_an_isolated_nodes_cool_down_is_off_unless_asked() -> None:
    def args(*sets: str) -> list[str]:
        (container,) = _render(*sets)[("Deployment", "trainguard-operator")]["spec"]["template"]["spec"][
            "containers"
        ]
        return list(container["args"])

    assert not any(arg.startswith("--isolation-cooldown") for arg in args())
    assert "--isolation-cooldown=3600" in args("isolationCooldownSeconds=3600")


def test_the_node_checker_is_off_by_default_and_on_runs_a_daemonset_whose_checks_alone_isolate() -> None:
    default = _render()
    assert not [kind for kind, _ in default if kind == "DaemonSet"]
    (container,) = default[("Deployment", "trainguard-operator")]["spec"]["template"]["spec"]["containers"]
    assert not any(arg.startswith(("--isolation-mode", "--node-checker")) for arg in container["args"])

    objects = _render("nodeChecker.enabled=true", "nodeChecker.periodSeconds=30")
    (operator,) = objects[("Deployment", "trainguard-operator")]["spec"]["template"]["spec"]["containers"]
    name = nodechecker.DEFAULT_NAME
    for flag in (
        "--isolation-mode=node-checker",
        "--node-checker-namespace=trainguard-system",
        f"--node-checker-name={name}",
        "--node-checker-max-isolated-share=0.1",
    ):
        assert flag in operator["args"]
    daemonset = objects[("DaemonSet", name)]
    assert daemonset["metadata"]["namespace"] == "trainguard-system"
    pod = daemonset["spec"]["template"]
    # What the operator trusts: the DaemonSet's pods (their label), under the ServiceAccount of the same name.
    assert pod["metadata"]["labels"][nodechecker.NAME_LABEL] == nodechecker.NAME_VALUE
    assert pod["spec"]["serviceAccountName"] == name
    assert objects[("ServiceAccount", name)]["metadata"]["namespace"] == "trainguard-system"
    # It keeps checking the nodes it isolated.
    assert {"key": isolation.KEY, "operator": "Exists", "effect": isolation.EFFECT} in pod["spec"][
        "tolerations"
    ]
    (checker,) = pod["spec"]["containers"]
    assert checker["image"] == operator["image"]
    assert checker["args"] == ["node-checker", "--period=30", "--timeout=60"]
    env = {e["name"]: e for e in checker["env"]}
    assert env[nodechecker.ENV_POD_NAME]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env[nodechecker.ENV_POD_NAMESPACE]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "nvidia.com/gpu" not in (checker["resources"].get("limits") or {})  # it takes no GPU
    # It may patch pods of its namespace (its own annotation), and nothing else.
    role = objects[("Role", name)]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
    binding = objects[("RoleBinding", name)]
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "trainguard-system"}]


def test_the_node_checker_and_no_isolation_are_refused_together() -> None:
    if k8s_skipped():
        pytest.skip("TRAINGUARD_SKIP_K8S=1: helm is built with the test cluster's binaries")
    node_bin = Path(run_script("build", "--node-binaries").split()[0])
    argv = [str(node_bin / "helm"), "template", "trainguard", str(CHART)]
    argv += ["--set", "nodeChecker.enabled=true", "--set", "isolateNodes=false"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "choose one" in done.stderr


def test_with_fault_injection_the_node_checker_reads_the_injected_items_of_its_own_namespace() -> None:
    daemonset = _render("nodeChecker.enabled=true", "faultInjection=true")[
        ("DaemonSet", nodechecker.DEFAULT_NAME)
    ]
    pod = daemonset["spec"]["template"]["spec"]
    (checker,) = pod["containers"]
    env = {e["name"]: e for e in checker["env"]}
    assert env[contract.ENV_NODE_NAME]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env[contract.ENV_FAULT_INJECT]["value"] == manifests.FAULT_INJECT_DIR
    (mount,) = checker["volumeMounts"]
    assert mount["mountPath"] == manifests.FAULT_INJECT_DIR
    (volume,) = pod["volumes"]
    assert volume["configMap"] == {"name": manifests.FAULT_INJECT_CONFIG_MAP, "optional": True}
    plain = _render("nodeChecker.enabled=true")[("DaemonSet", nodechecker.DEFAULT_NAME)]["spec"]["template"][
        "spec"
    ]
    assert "volumes" not in plain

"""The custom resources the operator serves, and where they are in the API."""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.api.crd import AITRAININGJOB_SCALE_ROLE, NATIVE_SCALE_ROLE
from trainguard.api.dialects import aitrainingjob
from trainguard.api.model import API_VERSION, KIND


@dataclass(frozen=True)
class JobKind:
    group: str
    version: str
    kind: str
    #: The role that ``kubectl scale`` moves (the CRD's scale subresource), as the job's spec spells it.
    scale_role: str

    @property
    def status_role(self) -> str:
        """The scale role as the status and the pods' labels name it: the canonical role (Kubeflow's
        ``Worker`` is ``worker``)."""
        return self.scale_role.lower()

    @property
    def plural(self) -> str:
        return self.kind.lower() + "s"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}"
        if namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        return base + (f"/{sub}" if sub else "")


_NATIVE_GROUP, _NATIVE_VERSION = API_VERSION.split("/")
_AITJ_GROUP, _AITJ_VERSION = aitrainingjob.API_VERSIONS[0].split("/")
NATIVE = JobKind(_NATIVE_GROUP, _NATIVE_VERSION, KIND, NATIVE_SCALE_ROLE)
AITRAININGJOB = JobKind(_AITJ_GROUP, _AITJ_VERSION, aitrainingjob.KIND, AITRAININGJOB_SCALE_ROLE)
#: Served only with ``--pytorchjobs`` (when no Kubeflow training operator owns them).
PYTORCHJOB = JobKind("kubeflow.org", "v1", "PyTorchJob", scale_role="Worker")

DEFAULT_KINDS = (NATIVE, AITRAININGJOB)

"""``trainguard.Live``: bad input is a clear error before anything starts."""

from __future__ import annotations

import pytest

import trainguard

torch = pytest.importorskip("torch")


def test_state_must_name_objects_with_state_dicts() -> None:
    with pytest.raises(ValueError, match="name at least one object"):
        trainguard.Live({})
    with pytest.raises(TypeError, match=r"state\['step'\] is a int, which has no state_dict"):
        trainguard.Live({"model": torch.nn.Linear(2, 2), "step": 3})


def test_without_a_store_the_error_says_which_variable_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TRAINGUARD_LIVE_STORE", "TRAINGUARD_RDZV_ENDPOINT", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(trainguard.LiveError, match="set TRAINGUARD_LIVE_STORE=host:port"):
        trainguard.Live({"model": torch.nn.Linear(2, 2)})


def test_an_unreachable_store_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "trainguard.sdk._storelink.STORE_TIMEOUT", __import__("datetime").timedelta(seconds=1)
    )
    with pytest.raises(trainguard.LiveError, match=r"cannot reach the store at 127\.0\.0\.1:1"):
        trainguard.Live({"model": torch.nn.Linear(2, 2)}, store="127.0.0.1:1")


def test_a_rounds_cause_is_the_errors_type_and_what_happened_not_where() -> None:
    from trainguard.sdk.live import _cause

    gloo = RuntimeError(
        "[/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:7579. More.\nx"
    )
    assert _cause(gloo) == "RuntimeError: Connection closed by peer [127.0.0.1]:7579. More."
    assert _cause(RuntimeError("")) == "RuntimeError: "
    assert len(_cause(RuntimeError("y" * 500))) == len("RuntimeError: ") + 120


def test_live_mode_sets_nccls_error_handling_unless_the_user_chose_one_that_ends_survivors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trainguard.sdk import _nccl

    env: dict[str, str] = {}
    assert _nccl.prepare(env)
    assert env == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    kept = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    assert _nccl.prepare(kept)
    assert kept == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    deadly = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert not _nccl.prepare(deadly)
    assert deadly == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}  # the user's, left as it is
    assert "live mode cannot keep the survivors" in capsys.readouterr().err


def test_a_sharded_state_must_be_built_by_live_and_over_gloo() -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        model = fully_shard(torch.nn.Linear(2, 2), mesh=init_device_mesh("cpu", (1,)))
        with pytest.raises(ValueError, match=r"state\['model'\] is sharded .* pass Live\(build=fn\) instead"):
            trainguard.Live({"model": model})
    finally:
        dist.destroy_process_group()
    with pytest.raises(ValueError, match="a sharded state is kept over gloo only"):
        trainguard.Live({}, build=lambda mesh: {}, backend="nccl")

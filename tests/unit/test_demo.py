from trainguard import demo


def test_demo_tours_every_example_and_succeeds(capsys) -> None:  # type: ignore[no-untyped-def]
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "test-horovod-elastic (AITrainingJob): launcher 1 [1-1], trainer 3 [1-5]" in out
    assert "apiVersion: trainguard.io/v1" in out
    assert out.count("action:") == len(demo.SEED_FAULTS)
    assert "shrink" in out

def test_fails():
    assert 1 == 2, "one is not two"

"""For every test: hypothesis checks properties, not speed (speed is measured in benchmarks/), so no example
has a deadline; the unit tests also run beside the real-node tests (scripts/test), where one example's time
says nothing."""

from hypothesis import settings

settings.register_profile("trainguard", deadline=None)
settings.load_profile("trainguard")

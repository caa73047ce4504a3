"""The fault tolerance check the agent runs in each pod: the readings (``readings``) and one check (``run``)."""

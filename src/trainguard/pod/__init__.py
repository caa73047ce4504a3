"""The pod side: what runs inside a job's pods beside the user's code, and what it agrees on with the control plane.

- ``contract``: every environment name, report event, live store key and member id, spelled once;
- ``workerevents``: the lines the launchers and the SDK write for the pod's agent;
- ``summary``: the one fold of the agent's report into the summary every backend and the controller read;
- ``torchrun`` (torchrun's agent with warm worker restarts) and ``livelaunch`` (a live job's workers): the
  launchers pods run, ``python -m trainguard.pod.torchrun``;
- ``rendezvous_store``: the program of a PyTorch job's rendezvous store pod;
- ``hangsignal``: what counts as progress for the agent's hang detection.

Standard library only, Python 3.8 (torch only lazily, from the image): the agent's bundle carries this package
into users' own images.
"""

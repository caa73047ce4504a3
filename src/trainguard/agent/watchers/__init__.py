"""The agent's watchers: one per channel the agent polls while its command runs, each with its own state.

Every ``poll_interval`` the agent's loop (``trainguard.agent.supervisor``) hands each watcher a ``Tick``, in a
fixed order: the control file (``control``: an exit code asked for by the runtime), nudges (``nudges``: another
pod failed), releases (``releases``: a lost peer's connections), the command's worker events (``workers``:
torchrun's restarts and rounds, live rounds) and hang detection (``hangs``: heartbeats, output, CPU and GPU
activity, progress reports). A watcher that answers with an outcome (``base``: an exit asked for, a hang) ends
that run of the command. A new channel is a new module here and one line in the agent's list.
"""

"""trainguard.observability: the read side of what the controller records. The fault timeline
(``timeline``), the metrics computed from stored statuses (``metrics``) and their Prometheus exposition
(``prometheus``). It reads the controller's status as data (typed fields, never the words of a reason) and
decides nothing; the local control plane, the operator, the simulator and the CLI use it."""

"""trainguard.backends.k8s: the Kubernetes operator (the only package that imports the Kubernetes client).

``Operator`` watches TrainingJobs and AITrainingJobs, their pods and the nodes, and drives each job with the
controller through ``JobBackend``; ``LeaderElection`` keeps two replicas from acting at once.
"""

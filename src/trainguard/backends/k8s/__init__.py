"""trainguard.backends.k8s"""

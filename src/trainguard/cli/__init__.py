"""trainguard.cli"""

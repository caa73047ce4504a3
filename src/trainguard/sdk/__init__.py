"""trainguard.sdk"""

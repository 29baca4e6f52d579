"""The cluster suite: worker hosts as network namespaces on one machine (`make test-cluster`)."""

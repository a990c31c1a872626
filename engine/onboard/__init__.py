"""Onboarding a user's host-driven CUDA + NCCL program: parse it (tree-sitter's CUDA grammar), build a
program model, analyse its communication, dataflow and repeated region (`cuco analyze`), and scaffold a
workload folder from the analysis (`cuco init`)."""

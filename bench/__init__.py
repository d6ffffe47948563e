"""The benchmark: the orchestrator against the alternatives and the machine's limit.

``python -m bench [--quick]`` starts the real local stack (Temporal dev server, platform
emulator, API, worker) on free loopback ports, runs the scenarios of docs/BENCHMARKS.md
against it and the baselines against the same emulator, prints a table, and writes a JSON
results file (and, for full runs, the SVG chart of docs/BENCHMARKS.md).

Trade-off: everything runs in one process tree on one machine, so the stack, the emulator,
the database and the baselines share the same CPUs. That is what makes the ratios honest
(every figure comes from the same run on the same hardware), at the cost of absolute numbers
that are lower than on a machine where the platform and the database live elsewhere.
"""

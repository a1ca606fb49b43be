"""Executors decide *where* tasks run: `execute(tasks, admit, finished)` runs each task on a worker
(in this process, or in long-lived Ray actors) and reports each finished task's stats; the phases
(scanner/run/phases.py) decide *what* runs. Their config, ExecutorConfig, lives in scanner/config.py."""

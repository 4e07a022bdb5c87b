"""The process's open-files limit: one socket per UDP simulator, one descriptor per serial port."""

from __future__ import annotations


def raise_nofile() -> None:
    """Many devices need many descriptors: lift the soft open-files limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass

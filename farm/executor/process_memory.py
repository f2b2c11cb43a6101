"""What a worker reads of its cell process from outside: the memory of the process and its
descendants (PSS, so shared pages count once), and the kernel's count of out-of-memory kills,
which tells a SIGKILL from the OOM killer from any other."""

from __future__ import annotations


def kernel_oom_kills() -> int | None:
    """How many processes this host's kernel has killed for lack of memory since boot (Linux)."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class ProcessTree:
    """Memory of a process and its descendants (Linux: PSS, so shared pages count once), with the
    descendants rescanned sparingly."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.children: list = []
        self.last: dict[int, int] = {}  # pid -> its last full reading
        self.root_rss = 0  # the root's resident size when it was last read in full

    def memory(self, rescan: bool) -> int:
        import psutil

        if rescan:
            try:
                self.children = self.root.children(recursive=True)
            except psutil.Error:
                self.children = []
        self.last = {}
        try:
            self.root_rss = self.root.memory_info().rss
        except psutil.Error:
            pass
        for process in (self.root, *self.children):
            try:
                # proportional set size: pages shared between the processes (a fork's, a library's)
                # count once in all, not once per process as resident sizes would
                self.last[process.pid] = process.memory_full_info().pss
            except AttributeError:  # no PSS on this system: resident size, an overcount
                self.last[process.pid] = process.memory_info().rss
            except psutil.Error:  # ended between the scan and now
                pass
        return sum(self.last.values())

    def memory_while_timing(self) -> int:
        """The child's last full reading plus what its resident size grew since (an O(1) read that
        leaves its page tables alone), and its descendants' last full readings."""
        import psutil

        root = self.last.get(self.root.pid, 0)
        try:
            root += max(0, self.root.memory_info().rss - self.root_rss)
        except psutil.Error:
            pass
        return root + sum(v for pid, v in self.last.items() if pid != self.root.pid)

"""The sandbox's risk audit: what a job's processes do, as an audit hook in each of them sees it.

Runs *inside* the cell (standard library only; never imports honing): the zygote loads this file
beside it once, makes one `RiskAudit` and installs its hook unarmed; each job's child arms it
just before the program runs, and every process the program forks inherits it. A trusted
harness that starts a fresh interpreter for the code it runs (the code judge's solution
process) passes the job's risk pipe on, and that interpreter arms the same audit
(`arm_inherited`), importing only what the events it sees call for. docs/sandbox.md, "Risk
audit". The kinds are honing.risk's "sandbox" ones (tests/sandbox/test_risk_audit.py holds the
two lists equal). Not covered: reading the pipe (the zygote) and turning lines into
`honing.risk` events (`honing.sandbox.cell.risk_events`).
"""

from __future__ import annotations

import _thread
import os
import sys

TYPE_CHECKING = False  # as typing's, without importing typing (mypy reads it as typing's)
if TYPE_CHECKING:
    import mmap
    import re
    from collections.abc import Callable
    from typing import Any

MODULE = "honing_riskaudit"  # its name in a job's sys.modules, where a harness finds it
# Set by the zygote: (`RiskAudit.spec()`, the risk pipe's fd) of the audit its jobs carry.
CURRENT: tuple[dict[str, Any], int] | None = None

RISK_KINDS = frozenset({
    "fs_write_outside", "workspace_wipe", "secret_read", "network", "process_kill",
    "process_explosion", "destructive_command", "audit_tamper", "native_code",
})  # fmt: skip
RISK_FD = 1000  # the job's end of its risk pipe: a fixed fd, high above what programs open
RISK_PER_KIND = 4  # distinct events of one kind a job reports
RISK_ONCE = frozenset({"workspace_wipe", "audit_tamper", "native_code"})  # one fact a job
RISK_TOTAL = 16  # events a job reports
RISK_DETAIL = 200  # characters of an event's detail (honing.risk.DETAIL_CHARS)
RISK_READ_MAX = 1 << 20  # bytes of the risk pipe read (a pipe holds 64 KiB)
# Process creations (fork, posix_spawn, Popen, system) in one job past which it is a
# process_explosion. The pids limit (`max_procs`, 32 by default) already bounds how many run at
# once; a harness may run dozens one after another, a fork bomb tries thousands a second.
PROCESS_EXPLOSION = 64

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
HARMLESS = frozenset({
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
    "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/ptmx",
})  # fmt: skip
HARMLESS_UNDER = ("/dev/fd/", "/dev/pts/", "/proc/self/fd/", "/proc/thread-self/fd/")
# The patterns, compiled when first needed (`_pattern`): a fresh interpreter that arms the audit
# (`arm_inherited`) should not pay for `re` unless a path or a command calls for it.
PATTERNS = {
    "pycache": r"/__pycache__(?:/[^/]+\.pyc(?:\.\d+)?)?$",  # the interpreter's own
    "secret": (
        r"^/etc/(?:g?shadow-?|sudoers(?:\.d/.*)?)$|^/etc/ssl/private/|^/(?:var/)?run/secrets(?:/|$)"
        r"|/\.(?:ssh|aws|gnupg)/|/\.kube/config$|/\.docker/config\.json$"
        r"|/\.(?:netrc|git-credentials|pgpass)$|/id_(?:rsa|dsa|ecdsa|ed25519)[^/]*$"
        r"|(?P<key>\.(?:pem|key)$)|^/proc/(?P<pid>\d+)/(?:task/\d+/)?environ$"
    ),
    "shell_variable": r"\$\{(\w+)\}|\$(\w+)",
    "fork_bomb": (
        r"(\S+)\s*\(\)\s*\{[^}]*?\1\s*\|\s*\1\s*&"  # :(){ :|:& };:
        r"|while\s*(?:True|1)\s*:\s*(?:os\.)?fork\(\)|fork\s+while\s+fork"
    ),
}
# Every path the secret pattern can match holds one of these (a path without any is not read
# through the pattern at all).
SECRET_HINTS = (
    "/etc/", "secrets", "/.ssh/", "/.aws/", "/.gnupg/", "/.kube/", "/.docker/", "/.netrc",
    "/.git-credentials", "/.pgpass", "/id_", ".pem", ".key", "/proc/",
)  # fmt: skip
_COMPILED: dict[str, Any] = {}
AF_UNIX = 1
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh"})
WRAPPERS = frozenset({
    "sudo", "doas", "env", "nohup", "nice", "ionice", "timeout", "time", "command", "exec",
    "builtin", "stdbuf", "setsid", "xargs", "busybox", "{", "!", "if", "then", "else", "elif",
    "do", "while", "until",
})  # fmt: skip
WRAPPER_VALUED = frozenset({"-u", "-g", "-n", "-s", "-k", "-c", "-I", "-P", "-L", "-d"})
DELETERS = frozenset({"rm", "unlink", "shred", "srm"})
FORMATTERS = frozenset({
    "mkfs", "mke2fs", "mkswap", "mkntfs", "wipefs", "fdisk", "sfdisk", "cfdisk", "parted",
    "sgdisk", "blkdiscard",
})  # fmt: skip
POWER = frozenset({"shutdown", "reboot", "halt", "poweroff"})
WRITERS = frozenset({"mv", "cp", "install", "ln", "touch", "mkdir", "rmdir", "truncate", "tee"})
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
FIND_UNFILTERED = frozenset({
    "-delete", "-depth", "-mindepth", "-maxdepth", "-xdev", "-mount", "-type", "-print",
    "-print0", "-ignore_readdir_race", "-noleaf", "-follow",
})  # fmt: skip
# Audit events of the paths they change: what it is called, where its dir_fd is (None: none).
CHANGES: dict[str, tuple[str, int | None]] = {
    "os.remove": ("remove", 1), "os.rmdir": ("rmdir", 1), "os.mkdir": ("mkdir", 2),
    "os.chmod": ("chmod", 2), "os.chown": ("chown", 3), "os.truncate": ("truncate", None),
    "os.utime": ("utime", 3), "os.setxattr": ("setxattr", None),
    "os.removexattr": ("removexattr", None),
}  # fmt: skip


class RiskAudit:
    """The audit hook of a job's processes: the risky actions among the audit events they raise.

    Made and installed once in the zygote, unarmed; `arm` arms it in the job's child right before
    the program runs, and every process the program forks inherits it, with the risk pipe (at
    the fixed fd `RISK_FD`) and `spawns`, the page where all of them count their process
    creations. Each event goes out as one line, `{"kind", "detail"}`, with no wait: past what the
    pipe holds it is dropped. The hook looks its event up in `handlers` and returns at once for
    any other.
    """

    def __init__(
        self,
        workspace: str,
        scratch: tuple[str, ...],
        trusted: tuple[str, ...],
        zygote: tuple[int, int],
        in_cell: bool,
        spawns: mmap.mmap,
        fd: int,
    ) -> None:
        self.args = (workspace, tuple(scratch), tuple(trusted), tuple(zygote), in_cell)
        self.workspace = os.path.realpath(workspace)
        self.roots = frozenset([self.workspace, *(os.path.realpath(d) for d in scratch)])
        self.under_roots = tuple(root + "/" for root in self.roots)
        # where key and certificate files are the interpreter's or a package's, not secrets
        self.trusted = tuple(os.path.realpath(d) + "/" for d in trusted)
        self.zygote_pid, self.zygote_pgid = zygote
        self.in_cell = in_cell  # every process of the cell but its pid 1 is the job's
        self.spawns = spawns
        self.fd = fd
        self.armed = [False]
        self.seen: set[tuple[str, str]] = set()  # this process's events so far
        self.counts: dict[str, int] = {}
        self.busy: set[int] = set()  # threads running a handler: events it raises are its own
        self.popen: list[str] | None = None  # the argv of the last Popen (it may posix_spawn)
        handlers: dict[str, Callable[[str, tuple[Any, ...]], None]] = {
            "open": self._open,
            "os.rename": self._rename,
            "os.link": self._link,
            "os.symlink": self._link,
            "shutil.rmtree": self._rmtree,
            "sys.addaudithook": self._tamper,
            "os.kill": self._kill,
            "os.killpg": self._kill,
            "os.fork": self._spawn,
            "os.forkpty": self._spawn,
            "os.system": self._spawn,
            "os.posix_spawn": self._spawn,
            "subprocess.Popen": self._spawn,
            "os.exec": self._exec,
        }
        handlers.update(dict.fromkeys(CHANGES, self._change))
        for event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            handlers[event] = self._socket
        for event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
            handlers[event] = self._resolve
        for event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle",
                      "ctypes.call_function", "ctypes.string_at", "ctypes.wstring_at",
                      "ctypes.cdata"):  # fmt: skip
            handlers[event] = self._native
        self.handlers = handlers

    def install(self) -> None:
        """Add the hook, unarmed, in the zygote (the zygote's own events pass through it): made
        there once, it costs a job's child one page written to arm it, not a hundred
        microseconds of page faults to make it."""

        # Default arguments, not a closure's cells: the `not in` of a local is all that the
        # uninteresting events (most of them: builtins.id, exec, compile...) cost.
        def hook(
            event: str,
            args: tuple[Any, ...],
            handlers: dict[str, Callable[[str, tuple[Any, ...]], None]] = self.handlers,
            armed: list[bool] = self.armed,
            busy: set[int] = self.busy,
            ident: Callable[[], int] = _thread.get_ident,
        ) -> None:
            if event not in handlers or not armed[0]:
                return
            me = ident()
            if me in busy:  # raised by the handler's own work (an open of /proc, say)
                return
            busy.add(me)
            try:
                handlers[event](event, args)
            except Exception:  # odd arguments (sys.audit takes any): never the program's error
                pass
            finally:
                busy.discard(me)

        sys.addaudithook(hook)

    def arm(self) -> None:
        """In the job's child, as the last thing before the program: from here on, its events
        (and those of every process it forks) are classified."""
        self.armed[0] = True

    def spec(self) -> dict[str, Any]:
        """How this audit was made, for `arm_inherited` in another interpreter of the job."""
        workspace, scratch, trusted, zygote, in_cell = self.args
        return {"workspace": workspace, "scratch": list(scratch), "trusted": list(trusted),
                "zygote": list(zygote), "in_cell": in_cell}  # fmt: skip

    def _emit(self, kind: str, detail: str) -> None:
        key = (kind, detail)
        count = self.counts.get(kind, 0)
        if key in self.seen or count >= (1 if kind in RISK_ONCE else RISK_PER_KIND):
            return
        if len(self.seen) >= RISK_TOTAL:
            return
        self.seen.add(key)
        self.counts[kind] = count + 1
        # A line of its own even after garbage another writer left without a newline; under
        # PIPE_BUF bytes, so that it is written whole or not at all.
        import json

        line = "\n" + json.dumps({"kind": kind, "detail": detail[:RISK_DETAIL]}) + "\n"
        try:  # noqa: SIM105 - contextlib would be one more import for a fresh interpreter
            os.write(self.fd, line.encode())
        except OSError:  # full (dropped), or the program closed the fd
            pass

    # -- paths ----------------------------------------------------------------------------

    @staticmethod
    def _absolute(path: Any, base: str | None = None, dir_fd: Any = None) -> str | None:
        """`path` made absolute (against `base`, `dir_fd` or the cwd) and normalised; None for
        a file descriptor."""
        if isinstance(path, int):
            return None
        text = os.fsdecode(path)
        if not text.startswith("/"):
            if base is None:
                use_fd = dir_fd is not None and dir_fd >= 0
                base = os.readlink(f"/proc/self/fd/{dir_fd}") if use_fd else os.getcwd()
            text = os.path.join(base, text)
        text = os.path.normpath(text)
        return "/" + text.lstrip("/") if text.startswith("//") else text

    def _inside(self, path: str) -> bool:
        """In the workspace or a scratch directory (their roots included)."""
        return path in self.roots or path.startswith(self.under_roots)

    def _harmless(self, path: str) -> bool:
        """A device or stream any program may write: /dev/null, its own fds."""
        if path in HARMLESS or path.startswith(HARMLESS_UNDER):
            return True
        return path.startswith(f"/proc/{os.getpid()}/fd/")

    def _outside(self, path: str) -> str | None:
        """Where changing `path` lands, shown, when that is outside the job's directories
        (followed through symlinks: a link in the workspace to /etc is outside); else None."""
        if self._harmless(path) or ("/__pycache__" in path and _pattern("pycache").search(path)):
            return None
        real = os.path.realpath(path)
        if self._inside(real):
            return None
        return path if real == path else f"{path} (-> {real})"

    def _holds_workspace(self, path: str) -> bool:
        return path == self.workspace or self.workspace.startswith(path.rstrip("/") + "/")

    def _secret(self, path: str, verb: str) -> None:
        if not any(hint in path for hint in SECRET_HINTS):
            return
        found = _pattern("secret").search(path)
        if found is None:
            return
        if found.group("key") is not None:  # *.pem, *.key: public ones ship with packages
            if self._inside(path) or path.startswith(self.trusted):
                return
        elif found.group("pid") is not None and int(found.group("pid")) == os.getpid():
            return  # its own environment
        self._emit("secret_read", f"{verb} {path}")

    # -- handlers: (event, args) as the audit gives them ---------------------------------------

    def _open(self, event: str, args: tuple[Any, ...]) -> None:
        path = self._absolute(args[0])
        if path is None:
            return
        if args[2] & WRITE_FLAGS and (where := self._outside(path)):
            self._emit("fs_write_outside", f"open for writing {where}")
        self._secret(path, "open")

    def _change(self, event: str, args: tuple[Any, ...]) -> None:
        verb, at = CHANGES[event]
        path = self._absolute(args[0], dir_fd=None if at is None else args[at])
        if path is None:
            return
        if event == "os.rmdir" and os.path.realpath(path) == self.workspace:
            self._emit("workspace_wipe", f"rmdir {path}")
        elif where := self._outside(path):
            self._emit("fs_write_outside", f"{verb} {where}")

    def _rename(self, event: str, args: tuple[Any, ...]) -> None:
        src = self._absolute(args[0], dir_fd=args[2])
        dst = self._absolute(args[1], dir_fd=args[3])
        if src is None or dst is None:
            return
        if os.path.realpath(src) == self.workspace:
            self._emit("workspace_wipe", f"rename {src} -> {dst}")
        elif self._outside(src) or self._outside(dst):
            self._emit("fs_write_outside", f"rename {src} -> {dst}")

    def _link(self, event: str, args: tuple[Any, ...]) -> None:
        hard = event == "os.link"
        dst = self._absolute(args[1], dir_fd=args[3] if hard else args[2])
        if dst is None:
            return
        # A symlink's relative target is read from the link's directory.
        src = self._absolute(args[0], None if hard else os.path.dirname(dst),
                             dir_fd=args[2] if hard else None)  # fmt: skip
        verb = event[3:]
        if where := self._outside(dst):
            self._emit("fs_write_outside", f"{verb} {where} to {src}")
        if src is not None:
            self._secret(src, f"{verb} to")

    def _rmtree(self, event: str, args: tuple[Any, ...]) -> None:
        path = self._absolute(args[0], dir_fd=args[1])
        if path is None:
            return
        real = os.path.realpath(path)
        if self._holds_workspace(real):
            self._emit("workspace_wipe", f"rmtree {path}")
        if where := self._outside(path):
            self._emit("fs_write_outside", f"rmtree {where}")

    def _socket(self, event: str, args: tuple[Any, ...]) -> None:
        sock, address = args[0], args[1]
        verb = event[7:]
        if address is None:  # sendmsg on a connected socket: its connect was seen
            return
        if sock.family == AF_UNIX:
            name = os.fsdecode(address)
            if not name or name[0] == "\0":  # abstract: in the cell's own network namespace
                return
            path = self._absolute(name)
            if path is None or self._inside(os.path.realpath(path)):
                return
            self._emit("network", f"{verb} unix socket {path}")
            return
        if isinstance(address, tuple) and len(address) >= 2:
            host, port = address[0], address[1]
            shown = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
        else:
            shown = repr(address)
        self._emit("network", f"{verb} {shown}")

    def _resolve(self, event: str, args: tuple[Any, ...]) -> None:
        host = args[0]
        if isinstance(host, bytes):
            host = host.decode(errors="replace")
        if not isinstance(host, str) or not host or host == "localhost":
            return
        if ":" in host or all(c in "0123456789." for c in host):  # a number: nothing to look up
            return
        if host == os.uname().nodename:
            return
        self._emit("network", f"resolve {host}")

    def _kill(self, event: str, args: tuple[Any, ...]) -> None:
        target, sig = int(args[0]), int(args[1])
        if not sig:
            return
        group = event == "os.killpg" or target < -1
        if target == -1:
            self._emit("process_kill", f"kill(-1, {_signal_name(sig)}): every process")
            return
        target = abs(target)
        if target and self._foreign(target, group):
            self._emit("process_kill", f"{event[3:]}({args[0]}, {_signal_name(sig)})")

    def _foreign(self, target: int, group: bool) -> bool:
        """`target` (a process, or a group) is not the job's."""
        if target == self.zygote_pid or (group and target == self.zygote_pgid):
            return True
        if self.in_cell:
            return False
        try:  # without a cell, the job's processes share its session
            with open(f"/proc/{target}/stat", "rb") as f:
                session = int(f.read().rsplit(b")", 1)[1].split()[3])
        except (OSError, ValueError, IndexError):
            return False  # gone
        return session != os.getsid(0)

    def _tamper(self, event: str, args: tuple[Any, ...]) -> None:
        self._emit("audit_tamper", "sys.addaudithook: the program added an audit hook")

    def _native(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "ctypes.dlopen":
            detail = f"ctypes.dlopen {args[0] if args[0] is not None else '(the process)'}"
        elif event.startswith("ctypes.dlsym"):
            detail = f"ctypes.dlsym {args[1]}"
        else:
            detail = event
        self._emit("native_code", detail)

    def _spawn(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "os.posix_spawn" and self.popen is not None and list(args[1]) == self.popen:
            self.popen = None  # subprocess's own posix_spawn: this Popen was seen and counted
            return
        spawns = self.spawns
        spawns[:8] = (int.from_bytes(spawns[:8], "little") + 1).to_bytes(8, "little")
        if event == "os.system":
            self._script(os.fsdecode(args[0]), os.getcwd(), 0)
        elif event == "subprocess.Popen":
            argv = [os.fsdecode(a) for a in args[1]]
            self.popen = argv
            cwd = self._absolute(args[2]) if args[2] is not None else os.getcwd()
            self._argv([os.fsdecode(args[0]), *argv[1:]], cwd or os.getcwd())
        elif event == "os.posix_spawn":
            self._argv([os.fsdecode(args[0]), *(os.fsdecode(a) for a in args[1][1:])], os.getcwd())

    def _exec(self, event: str, args: tuple[Any, ...]) -> None:
        self._argv([os.fsdecode(args[0]), *(os.fsdecode(a) for a in args[1][1:])], os.getcwd())

    # -- commands: what a program started (not analysed: what a new interpreter runs) ---------

    def _argv(self, words: list[str], cwd: str) -> None:
        if _pattern("fork_bomb").search(" ".join(words)):
            import shlex

            self._emit("destructive_command", f"fork bomb: {shlex.join(words)}")
        else:
            self._command(words, cwd, 0, shell=False)

    def _script(self, script: str, cwd: str, depth: int) -> None:
        """A shell script (sh -c, os.system): its simple commands, in order (a `cd` moves)."""
        if _pattern("fork_bomb").search(script):
            self._emit("destructive_command", f"fork bomb: {script}")
            return
        text = script.replace("\n", ";").replace("`", ";")
        import shlex

        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # an unclosed quote: the shell would refuse it too; read its words
            tokens = text.split()
        words: list[str] = []
        for token in [*tokens, ";"]:
            if token and all(c in ";&|()" for c in token):
                if words:
                    cwd = self._command(words, cwd, depth, shell=True)
                words = []
            else:
                words.append(token)

    def _command(self, words: list[str], cwd: str, depth: int, shell: bool) -> str:
        """Classify one simple command; returns the cwd after it."""
        line = " ".join(words)
        if shell:
            words, written = _redirections(words)
            for word in written:
                path, _ = self._target(word, cwd)
                if not self._inside(path) and not self._harmless(path):
                    self._emit("fs_write_outside", f"redirect to {path}: {line}")
        words = _unwrapped(words)
        if not words:
            return cwd
        name, args = os.path.basename(words[0]), words[1:]
        options, operands = _options(args)
        if name in ("cd", "pushd"):
            return self._target(operands[0] if operands else "~", cwd)[0]
        if name in SHELLS:
            script = _shell_script(args)
            if script is not None and depth < 3:
                self._script(script, cwd, depth + 1)
        elif name in DELETERS:
            recursive = any(o == "--recursive" or (o[1:2] != "-" and ("r" in o or "R" in o))
                            for o in options)  # fmt: skip
            for word in operands:
                path, everything = self._target(word, cwd)
                if recursive and everything and self._holds_workspace(path):
                    self._emit("workspace_wipe", _at(line, path))
                if not self._inside(path) and not self._harmless(path):
                    self._emit("destructive_command", _at(line, path))
        elif name == "find":
            self._find(args, cwd, line)
        elif name == "dd":
            for arg in args:
                if arg.startswith("of="):
                    path, _ = self._target(arg[3:], cwd)
                    if not self._inside(path) and not self._harmless(path):
                        self._emit("destructive_command", line)
        elif _destroys_as_such(name, args, operands):
            self._emit("destructive_command", line)
        elif name in ("chmod", "chown", "chgrp"):
            recursive = any(o == "--recursive" or (o[1:2] != "-" and "R" in o) for o in options)
            named = any(o.startswith("--reference") for o in options)
            for word in operands if named else operands[1:]:
                path, _ = self._target(word, cwd)
                if not self._inside(path) and not self._harmless(path):
                    kind = "destructive_command" if recursive else "fs_write_outside"
                    self._emit(kind, _at(line, path))
        elif name in WRITERS:
            targets = operands
            if name in ("cp", "install", "ln"):
                directory = _option_value(args, "-t", "--target-directory")
                targets = [directory] if directory is not None else operands[-1:]
            for word in targets:
                path, _ = self._target(word, cwd)
                if not self._inside(path) and not self._harmless(path):
                    self._emit("fs_write_outside", _at(line, path))
        return cwd

    def _find(self, args: list[str], cwd: str, line: str) -> None:
        """find ... -delete (or -exec rm): destructive outside the job's directories, a
        workspace wipe when it deletes everything under the workspace."""
        i = 0
        while i < len(args) and args[i] in ("-H", "-L", "-P"):
            i += 1
        starts: list[str] = []
        while i < len(args) and not args[i].startswith(("-", "(", "!")):
            starts.append(args[i])
            i += 1
        rest = args[i:]
        deletes = "-delete" in rest or any(
            arg in FIND_EXEC and os.path.basename(rest[j + 1]) in DELETERS
            for j, arg in enumerate(rest[:-1])
        )
        if not deletes:
            return
        import itertools

        predicates = list(itertools.takewhile(lambda a: a not in FIND_EXEC, rest))
        filtered = any(p.startswith("-") and p not in FIND_UNFILTERED for p in predicates)
        for word in starts or ["."]:
            path, _ = self._target(word, cwd)
            if not filtered and self._holds_workspace(path):
                self._emit("workspace_wipe", _at(line, path))
            if not self._inside(path) and not self._harmless(path):
                self._emit("destructive_command", _at(line, path))

    def _target(self, word: str, cwd: str) -> tuple[str, bool]:
        """A command's path operand as the shell would expand it (~, $VAR, unset ones empty),
        absolute; a glob stands for the directory it lists. The flag: it names the whole of
        that path (no glob, or a last component `*`), not some of its entries."""
        home = os.environ.get("HOME", "/")
        if word == "~" or word.startswith("~/"):
            word = home + word[1:]
        variable = _pattern("shell_variable")
        word = variable.sub(lambda m: os.environ.get(m.group(1) or m.group(2), ""), word)
        everything = True
        parts = word.split("/")
        for i, part in enumerate(parts):
            if any(c in part for c in "*?["):
                everything = i == len(parts) - 1 and part in ("*", ".*")
                word = "/".join(parts[:i]) or ("/" if word.startswith("/") else ".")
                break
        path = self._absolute(word or ".", cwd)
        assert path is not None
        return path, everything


def _at(line: str, path: str) -> str:
    """A command line, with the path it acts on where the line does not show it as such."""
    return line if f" {path} " in f" {line} " else f"{line} [{path}]"


def _signal_name(sig: int) -> str:
    try:
        import signal

        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _destroys_as_such(name: str, args: list[str], operands: list[str]) -> bool:
    """A command that destroys whatever its operands: formats a disk, powers off, kills every
    process (kill -1, or the cell's pid 1)."""
    if name in FORMATTERS or name.startswith("mkfs.") or name in POWER or name == "killall5":
        return True
    if name in ("init", "telinit"):
        return operands[:1] in (["0"], ["6"])
    if name == "systemctl":
        return bool({"poweroff", "reboot", "halt", "kexec"} & set(operands))
    return name == "kill" and bool(_kill_targets(args) & {"-1", "1"})


def _redirections(words: list[str]) -> tuple[list[str], list[str]]:
    """A simple command's words without its redirections, and the files it writes to."""
    kept: list[str] = []
    written: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in (">", ">>", ">|", "&>", "&>>", "<>") and i + 1 < len(words):
            written.append(words[i + 1])
            i += 2
        elif word in ("<", "<<", "<<<", ">&", "<&", ">>&") and i + 1 < len(words):
            i += 2  # input, or another descriptor
        else:
            kept.append(word)
            i += 1
    return kept, written


def _unwrapped(words: list[str]) -> list[str]:
    """The command a wrapper runs (sudo, env, timeout 5, xargs...), assignments dropped."""
    while words:
        if "=" in words[0] and words[0].split("=", 1)[0].isidentifier():  # VAR=value cmd
            words = words[1:]
            continue
        head = os.path.basename(words[0])
        if head not in WRAPPERS:
            break
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[2:] if words[0] in WRAPPER_VALUED else words[1:]
        if head == "timeout" and words:
            words = words[1:]  # its duration
    return words


def _options(args: list[str]) -> tuple[list[str], list[str]]:
    options: list[str] = []
    operands: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            operands += args[i + 1 :]
            break
        (options if arg.startswith("-") and arg != "-" else operands).append(arg)
    return options, operands


def _option_value(args: list[str], short: str, long: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == short and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(long + "="):
            return arg.split("=", 1)[1]
    return None


def _shell_script(args: list[str]) -> str | None:
    """The script of `sh -c SCRIPT` (also -lc, -ec...); None when it runs a file or stdin."""
    for i, arg in enumerate(args):
        if arg == "--" or not arg.startswith("-"):
            return None
        if arg[1:2] != "-" and "c" in arg[1:]:
            rest = [a for a in args[i + 1 :] if not a.startswith("-")]
            return rest[0] if rest else None
    return None


def _kill_targets(args: list[str]) -> set[str]:
    """What `kill` signals: the words after its signal option."""
    i = 0
    if args and args[0] in ("-s", "-n"):
        i = 2
    elif args and args[0].startswith("-") and args[0] != "--":
        i = 1
    if i < len(args) and args[i] == "--":
        i += 1
    return set(args[i:])


def _pattern(name: str) -> re.Pattern[str]:
    """The compiled pattern `name` of PATTERNS (compiled once, on first use)."""
    found = _COMPILED.get(name)
    if found is None:
        import re

        found = _COMPILED[name] = re.compile(PATTERNS[name])
    return found


def arm_inherited(spec: dict[str, Any], fd: int) -> None:
    """Install and arm here the audit of the job that started this interpreter (`spec`, as
    `RiskAudit.spec` gave it), reporting on `fd`, the job's risk pipe passed on. Its process
    creations are counted apart from the job's."""
    import mmap

    audit = RiskAudit(
        spec["workspace"], tuple(spec["scratch"]), tuple(spec["trusted"]),
        (int(spec["zygote"][0]), int(spec["zygote"][1])), bool(spec["in_cell"]),
        mmap.mmap(-1, 8), fd,
    )  # fmt: skip
    audit.install()
    audit.arm()

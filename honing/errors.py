"""The one exception hierarchy of honing.

    HoningError                      base of every error honing raises on purpose
    ├── ConfigError                  a config value is wrong; the message names the key and the fix
    └── SandboxError                 the sandbox itself failed (never the program it ran)
        ├── SandboxUnavailable       isolation cannot be set up here (bubblewrap missing, …)
        ├── CellCrashed              a cell died or stopped answering; the pool replaces it
        ├── WorkspaceBusy            a workspace was touched while a run was using it
        └── RuntimeBuildError        `honing sandbox runtime build` could not build a runtime

A program that fails inside the sandbox is not an exception: it is an `ExecResult` whose status
says what happened. Exceptions are for failures of honing's own machinery.
"""


class HoningError(Exception):
    """Base class of every error honing raises on purpose."""


class ConfigError(HoningError):
    """A configuration value is missing or invalid; the message names the key and the fix."""


class SandboxError(HoningError):
    """The sandbox machinery failed (as opposed to the program it executed)."""


class SandboxUnavailable(SandboxError):
    """Isolation cannot be set up on this machine; the message says how to fix it."""


class CellCrashed(SandboxError):
    """A sandbox cell died or stopped answering its protocol."""


class WorkspaceBusy(SandboxError):
    """A persistent workspace was read, written or restored while a run was using it."""


class RuntimeBuildError(SandboxError):
    """A named runtime could not be built."""

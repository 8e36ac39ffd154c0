"""nibble's errors as Python exceptions: one class per status of the C API, each carrying nibble's
message (which names the layer, the tensor, what was expected and what was found)."""


class NibbleError(Exception):
    """An error reported by nibble.

    status: the C API status name ("invalid argument", "no backend", ...); code: its number;
    selection: where no backend could take a layer, the whole trace (a nibble.Selection), else None.
    """

    code = None

    def __init__(self, message, status=None, code=None, selection=None):
        super().__init__(message)
        self.message = message
        self.status = status
        if code is not None:
            self.code = code
        self.selection = selection


class InvalidArgumentError(NibbleError, ValueError):
    code = 1


class FormatError(NibbleError, ValueError):
    code = 2


class UnsupportedError(NibbleError):
    code = 3


class NotFoundError(NibbleError, LookupError):
    code = 4


class NibbleIOError(NibbleError, OSError):
    code = 5


class PluginError(NibbleError):
    code = 6


class NoBackendError(NibbleError):
    code = 7


class DeviceError(NibbleError):
    code = 8


class LimitError(NibbleError):
    code = 9


class PluginUnsupportedError(NibbleError):
    code = 10


class NoDeviceError(NibbleError):
    code = 11


class OutOfMemoryError(NibbleError, MemoryError):
    code = 12


class InternalError(NibbleError):
    code = 13


BY_CODE = {c.code: c for c in (InvalidArgumentError, FormatError, UnsupportedError, NotFoundError, NibbleIOError,
                               PluginError, NoBackendError, DeviceError, LimitError, PluginUnsupportedError,
                               NoDeviceError, OutOfMemoryError, InternalError)}

"""The one error a push raises for its own reasons (library and input errors keep their own types)."""


class HubError(ValueError):
    """A push that cannot go ahead (no token, nothing to push); one line."""

"""What a search is asked (search/miniprompt.py): one target, and what is known of it before the search.

A search starts from nothing, or from one thing known before it: a certificate (a prompt string known to
precede the text), a decided prompt (a verdict's prompt, which the search only shrinks) or a warm
prompt (found for this target on another model). A search uses one of them, so `known` holds at most
one. Where the budget cut an earlier run of the same search (`resume`) is not a start of its own: a
budget may cut a search whatever it started from, and the relaunch goes on from where it stood."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scanner.search.resume import Resume


@dataclass(frozen=True)
class Certificate:
    """A prompt string known to precede the text (e.g. the text before a span): if it elicits the target,
    it bounds |x*| from above before any optimization."""

    prompt: str


@dataclass(frozen=True)
class Decided:
    """A prompt a verdict-only search found (or a certificate that settled the span): the search only
    shrinks below it, where that search would have gone on (FastSchedule decided_length). `certificate`:
    the span's own, which bounds the search should the decided prompt no longer elicit the target."""

    prompt: str
    certificate: str | None = None


@dataclass(frozen=True)
class Warm:
    """A prompt found for this target on another model (`acr-scan compare`): checked by generation first;
    if it elicits the target it is the search's first success, else GCG starts from it at its length."""

    prompt: str


KNOWN = (Certificate, Decided, Warm)


@dataclass(frozen=True)
class SearchRequest:
    """One target to search: its text; `target_ids`, the target as tokenized inside its document (a
    scanned span), where a standalone encoding of `text` could split its first token differently;
    `known`, what the search starts from; `resume`, where the search budget cut this target's search
    (search/resume.py)."""

    text: str
    target_ids: Sequence[int] | None = None
    known: Certificate | Decided | Warm | None = None
    resume: Resume | None = None

    def __post_init__(self) -> None:
        if self.known is not None and not isinstance(self.known, KNOWN):
            raise TypeError(
                f"SearchRequest.known is {self.known!r}; expected None or one of Certificate(prompt), "
                "Decided(prompt, certificate) or Warm(prompt) (scanner/search/request.py)"
            )
        if self.target_ids is not None:  # frozen: a caller's list cannot change the request afterwards
            object.__setattr__(self, "target_ids", tuple(self.target_ids))

    @property
    def certificate(self) -> str | None:
        """The prompt string known to precede the text, if any (a decided prompt's fallback included)."""
        if isinstance(self.known, Certificate):
            return self.known.prompt
        return self.known.certificate if isinstance(self.known, Decided) else None

    @property
    def decided(self) -> str | None:
        return self.known.prompt if isinstance(self.known, Decided) else None

    @property
    def warm(self) -> str | None:
        return self.known.prompt if isinstance(self.known, Warm) else None

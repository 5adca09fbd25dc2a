"""The DOM a browser dumped, read back into a tree to ask questions of (elements by tag, id, class,
attribute; their text as the browser would show it). Python's own HTML tokenizer: no dependency."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list = field(default_factory=list)  # Elements and strings

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Element):
                yield from c.iter()

    def find_all(self, tag: str | None = None, **attrs: str) -> list["Element"]:
        """Elements of ``tag`` (any when None) whose attributes hold these values (class_: one of the classes)."""
        out = []
        for el in self.iter():
            if tag is not None and el.tag != tag:
                continue
            if all((v in el.attrs.get("class", "").split()) if k == "class_" else el.attrs.get(k.replace("_", "-")) == v
                   for k, v in attrs.items()):
                out.append(el)
        return out

    def by_id(self, id_: str) -> "Element | None":
        found = self.find_all(id=id_)
        return found[0] if found else None


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        el = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(el)
        if tag not in VOID:
            self.stack.append(el)

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):  # the browser's serialisation is well nested
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(markup: str) -> Element:
    builder = _Builder()
    builder.feed(markup)
    builder.close()
    return builder.root

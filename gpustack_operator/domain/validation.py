"""Kubernetes validity rules for names, label keys and label values.

The same predicates the API server applies (apimachinery ``validation``), so every generated
key, value and name can be checked before it is sent, and tests can assert validity.
"""

from __future__ import annotations

import re
from typing import Final

LABEL_VALUE_MAX_LEN: Final = 63
DNS_LABEL_MAX_LEN: Final = 63
DNS_SUBDOMAIN_MAX_LEN: Final = 253
QUALIFIED_NAME_MAX_LEN: Final = 63

_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_valid_label_value(value: str) -> bool:
    """A label value: empty, or at most 63 of ``[A-Za-z0-9-_.]`` starting/ending alphanumeric."""
    if value == "":
        return True
    return len(value) <= LABEL_VALUE_MAX_LEN and _QUALIFIED_NAME.fullmatch(value) is not None


def is_valid_dns_label(name: str) -> bool:
    """An RFC 1123 label (namespace names, most name segments)."""
    return len(name) <= DNS_LABEL_MAX_LEN and _DNS_LABEL.fullmatch(name) is not None


def is_valid_dns_subdomain(name: str) -> bool:
    """An RFC 1123 subdomain: the rule for most object names (nodes, Kueue objects)."""
    return len(name) <= DNS_SUBDOMAIN_MAX_LEN and _DNS_SUBDOMAIN.fullmatch(name) is not None


def is_valid_label_key(key: str) -> bool:
    """A qualified name: ``[prefix/]name``, prefix a DNS subdomain, name at most 63 chars.

    Annotation keys follow the same rule.
    """
    prefix, slash, name = key.rpartition("/")
    if slash and not is_valid_dns_subdomain(prefix):
        return False
    return len(name) <= QUALIFIED_NAME_MAX_LEN and _QUALIFIED_NAME.fullmatch(name) is not None

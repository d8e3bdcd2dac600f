"""Prompt-injection detections beyond the reference's phrase list, for memory content.

The reference's patterns (`hermesd.memory.threats`) match fixed English phrases on the raw
text, so a paraphrase, a look-alike letter, another language, a fake role header or a base64
blob passes them. `findings` here looks again where they found nothing:

- the reference's patterns on the folded text (`hermesd.untrusted.fold`: NFKC, invisible
  characters removed, Cyrillic/Greek look-alikes as Latin, whitespace collapsed);
- structural signs: a role header (``SYSTEM:``, ``<system>``, ``### Instruction``,
  ``<|im_start|>``, ``[INST]``), "ignore/forget/override the previous rules" paraphrases,
  "from now on you …", jailbreak names, secrets sent to an address, silent actions;
- the same in German, French, Spanish, Italian, Portuguese, Russian and Chinese (basics);
- base64 blobs decoded, and the decoded text checked the same way.

Ids are ours (``role_header``, ``override_instructions``, ``base64_payload`` …); a folded match
of a reference pattern keeps the reference's id. Measured against
tests/data/memory_injection_corpus.json (tests/unit/test_memory_injection.py).
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from collections.abc import Callable

from hermesd import untrusted

_W = r"(?:[\w'’-]+[\s,]+){0,8}"  # up to eight words between key words, as the reference
_PRIOR = (
    r"(?:previous|prior|earlier|above|preceding|former|original|initial|existing|old|"
    r"all|any|every|your|the|these|those|my|its|system)"
)
_RULES = (
    r"(?:instructions?|rules?|guidelines?|directives?|directions|prompts?|guidance|orders|"
    r"constraints|"
    r"programming|restrictions|polic(?:y|ies)|commands|safety|guardrails|filters)"
)
_OVERRIDE_VERB = (
    r"(?:ignore|disregard|forget|override|bypass|skip|drop|discard|abandon|dismiss|neglect|"
    r"set\s+aside|throw\s+out|pay\s+no\s+attention\s+to|stop\s+following|no\s+longer\s+follow|"
    r"do\s+not\s+follow|don'?t\s+follow|cancel|void|nullify|supersede|replace)"
)
# what governs the assistant, and words saying it is void, outranked or waived
_CONTROL = (
    r"(?:instructions?|guidelines|rules|polic(?:y|ies)|system\s+(?:prompt|message)|operator|"
    r"safety|approvals?|restrictions|refusals?|confirmations?|consent|guardrails|filters|"
    r"permissions?)"
)
_VOIDED = (
    r"(?:replaced(?!\s+by)|void|invalid|obsolete|(?:take|takes|have|has)\s+(?:priority|precedence)|"
    r"overrides?|overridden|do(?:es)?\s+not\s+apply|no\s+longer\s+appl(?:y|ies)|disabled|"
    r"suspended|lifted|waived|revoked|pre-?approved|granted|never\s+ask|only\s+policy|"
    r"over\s+the\s+(?:operator|system)|comply\s+with\s+all|don'?t\s+apply|skip\s+them|"
    r"(?:were|was|are|is)\s+a\s+mistake|act\s+without\s+them|allows?\s+anything|"
    r"anything\s+goes)"
)

#: (id, pattern, flags) matched on the folded text, one line at a time kept where ^ matters
_FOLDED: tuple[tuple[str, str, int], ...] = (
    (
        "role_header",
        r"(?m)^\s*(?:SYSTEM|ASSISTANT|DEVELOPER|ADMIN|ROOT)\s*(?:MESSAGE|PROMPT)?\s*:",
        0,  # upper case only: "System: Arch Linux" is a note about a machine
    ),
    ("role_header", r"(?m)^\s*(?:system|assistant|developer)\s*:\s*(?:$|you\b)", re.I),
    (
        "role_header",
        r"<\s*/?\s*(?:system|developer|assistant|instructions?|sys|admin)\s*>|<<\s*/?\s*SYS\s*>>"
        r"|<\|?\s*(?:im_start|im_end|system|endoftext)\s*\|?>|\[\s*/?\s*(?:INST|SYSTEM)\s*\]"
        r"|(?m:^\s*#{1,6}\s*(?:system|instructions?|new\s+instructions?|developer|admin)\b)"
        r"|\b(?:BEGIN|END)\s+(?:SYSTEM|ADMIN|DEVELOPER)\b"
        r"|[<\[]{1,2}\s*/?\s*(?:system|admin|assistant|developer|operator|root)(?:[\s_-]\w+){0,3}"
        r"\s*[>\]]{1,2}"
        r"|\bsystem\s+(?:(?:message|prompt|note|notice|update|override|directive|change)\s*){1,2}:"
        r"|\bhidden\s+(?:instructions?|prompt|command|directive)s?\s*:",
        re.IGNORECASE,
    ),
    ("override_instructions", rf"\b{_OVERRIDE_VERB}\s+{_W}{_PRIOR}\s+{_W}{_RULES}\b", re.I),
    (
        "new_instructions",
        r"\bfrom\s+(?:now|this\s+(?:moment|point)|here)\s+on,?\s+(?:you|always|never|ignore|"
        r"respond|answer|reply|act|obey)"
        r"|\byou\s+(?:may|can|are\s+(?:now\s+)?allowed\s+to)\s+now\s+(?:run|execute|ignore|bypass|"
        r"access|disable)\b|\b(?:policy|security|system|safety)\s+update\s+from\b"
        r"|\b(?:written|sent|issued|approved|authori[sz]ed)\s+by\s+(?:the\s+|your\s+)?(?:system\s+)?"
        r"(?:administrator|admin|developers?|operator|openai|anthropic|staff|security\s+team)\b"
        r"|\bfollow\s+(?:it|this|these|them)\s+(?:before|above|over)\s+(?:anything|everything|all)"
        r"|\b(?:your|the|the\s+user'?s)\s+(?:new|real|true|actual|updated)\s+(?:instructions?|"
        r"rules?|task|"
        r"goal|purpose|directive|role|identity)\s+(?:is|are|:)"
        r"|\bnew\s+(?:instructions?|directives?|rules?)\s*:"
        r"|\byou\s+are\s+no\s+longer\s+(?:an?\s+|bound|restricted|limited|hermes|required)"
        r"|\b(?:obey|follow)\s+(?:only\s+)?(?:these|the\s+following|my|this)\s+"
        r"(?:new\s+)?(?:instructions?|rules?|commands?|orders)\b",
        re.I,
    ),
    (
        "jailbreak",
        r"\b(?:developer|god|jailbreak|unrestricted|dan)\s+mode\b|\bjailbroken\b"
        r"|\bwithout\s+(?:any\s+)?(?:limitations|restrictions|filters|guardrails)\b"
        r"|\byou\s+are\s+(?:now\s+)?DAN\b|\b(?:free|freed)\s+(?:of|from)\s+(?:all\s+|any\s+)?"
        r"(?:restrictions|rules|limits|guidelines|filters|constraints)\b"
        r"|\bdo\s+anything\s+now\b|\bact\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|"
        r"uncensored|jailbroken|evil)\b|\bno\s+(?:ethical|moral|safety)\s+"
        r"(?:guidelines|restrictions|limits|constraints)\b",
        re.I,
    ),
    (
        "reveal_secrets",
        r"\b(?:reveal|print|show|output|repeat|dump|display|disclose|leak|tell\s+me|copy|"
        r"(?:reply|respond|answer)\s+with|include)\s+"
        rf"{_W}(?:system\s+prompt|hidden\s+(?:instructions|prompt)|initial\s+instructions|"
        r"api[\s_-]?keys?|private\s+keys?|passwords?|credentials|secrets?|\.env\b|tokens?|"
        r"environment\s+variables|env\s+vars)",
        re.I,
    ),
    (
        "exfil_address",
        r"\b(?:send|email|e-mail|mail|post|upload|forward|leak|exfiltrate|transmit|copy|paste|"
        r"share)\b[^\n]{0,120}\b(?:api[\s_-]?keys?|tokens?|passwords?|credentials|secrets?|"
        r"private\s+keys?|ssh\s+keys?|\.env|env|environment|output|conversation|chat\s+history|"
        r"memory|files?|messages?)\b"
        r"[^\n]{0,120}\b(?:to|at|into)\s+(?:\S+@\S+\.\w+|https?://|(?:[\w-]+\.)+"
        r"(?:com|net|org|io|ru|cn|xyz|top|site|info|biz|me|co)\b)",
        re.I,
    ),
    (
        "silent_action",
        r"\b(?:silently|secretly|quietly|covertly|without\s+(?:asking|telling|informing|"
        r"notifying|mentioning|confirming)(?:\s+(?:the\s+user|anyone|them))?)\b[^\n]{0,80}\b"
        r"(?:run|execute|send|upload|delete|remove|copy|install|download|curl|wget|post|forward|"
        r"disable|append|include|add|attach|embed|insert|rm)\b"
        r"|\b(?:run|execute|send|upload|delete|install|download|curl|wget|forward|disable|rm)\b"
        r"[^\n]{0,80}\b(?:silently|secretly|covertly|without\s+(?:asking|telling|informing|"
        r"notifying|mentioning|confirm\w*|the\s+user(?:'s)?\s+(?:knowing|knowledge|consent|"
        r"approval)))\b"
        r"|\b(?:never|don'?t|do\s+not)\s+(?:tell|inform|mention(?:\s+(?:it|this))?\s+to|notify|"
        r"let)\s+(?:the\s+)?user\b"
        r"|\b(?:keep|hold)\s+(?:this|it)\s+(?:a\s+)?secret\s+from\s+(?:the\s+)?user\b"
        r"|\bsay\s+nothing\b"
        r"|\bhide\s+(?:this|it|that)\s+from\s+(?:the\s+)?user\b",
        re.I,
    ),
    (
        "auto_execute",
        r"\b(?:always|automatically|at\s+the\s+start\s+of\s+(?:each|every)\s+session|"
        r"on\s+every\s+(?:turn|session|message)|before\s+(?:each|every|any)\s+"
        r"(?:reply|answer|response|message))\b[^\n]{0,80}\b(?:run|execute|eval|call|fetch|"
        r"pipe)\b[^\n]{0,80}(?:\bcurl\b|\bwget\b|\|\s*(?:ba)?sh\b|\bnc\s|https?://|\bbash\s+-c\b"
        r"|\bpython3?\s+-c\b|base64\s+-d)",
        re.I,
    ),
    (
        "control_override",
        # one sentence naming what governs the assistant and saying it no longer does
        rf"(?:\b{_CONTROL}\b[^.!?;\n]{{0,120}}\b{_VOIDED}|\b{_VOIDED}[^.!?;\n]{{0,120}}"
        rf"\b{_CONTROL}\b)",
        re.I,
    ),
    (
        "untrusted_as_command",
        r"\btreat\s+[^.\n]{0,60}\bas\s+(?:commands?|instructions?|orders|(?:coming\s+)?from\s+"
        r"the\s+user)\b|\b(?:do(?:ing)?|follow(?:ing)?|execut(?:e|ing)|obey(?:ing)?)\s+"
        r"(?:what(?:ever)?|everything)\s+(?:it|they|the\s+\w+)\s+(?:says?|tells?|asks?)\b"
        r"|\bas\s+(?:binding|mandatory|authoritative)\s+(?:commands?|instructions?|orders|rules)\b"
        r"|\b(?:load|fetch|read|download|open)\s+(?:and\s+)?(?:follow|obey|execute|run)\s+"
        r"(?:them|it|those|these)\b"
        r"|\bexecute\s+(?:each|every)\s+line\b|\b(?:tells?|asks?)\s+you\s+to\s+do\s+"
        r"(?:something|anything)[^.\n]{0,20}\bdo\s+it\b",
        re.I,
    ),
    (
        "permission_grant",
        r"\b(?:you(?:'re|\s+are)|(?:the\s+)?assistant\s+is)\s+(?:now\s+)?(?:allowed|permitted|"
        r"authori[sz]ed|free)\s+to\s+(?:skip|bypass|ignore|disable|approve|run\s+any)\b"
        r"|\bapprove\s+everything\s+yourself\b"
        r"|\b(?:disregard|ignore)\s+(?:the\s+user'?s?\s+)?(?:requests?|attempts?|commands?)\s+to\s+"
        r"(?:stop|cancel|interrupt|pause)\b"
        r"|\b(?:has|have)\s+no\s+(?:content\s+)?(?:policy|policies|rules|restrictions|filters|"
        r"guidelines|guardrails)\b",
        re.I,
    ),
    (
        "planted_command",
        r"\b(?:prepend|append|add|insert)\w*\b[^\n]{0,80}(?:\|\s*(?:ba)?sh\b|\bcurl\b|\bwget\b)"
        r"[^\n]{0,80}\b(?:every|each|all)\b"
        r"|\b(?:add|append|install|put|copy)\b[^\n]{0,80}\b(?:public\s+key|trusted\s+keys|"
        r"ssh\s+key|authorized\s+keys)\b[^\n]{0,120}\bssh-(?:ed25519|rsa|dss|ecdsa)",
        re.I,
    ),
    (
        "hidden_beacon",
        r"\b(?:hidden|invisible|tracking|1x1|zero[\s-]size)\s+(?:markdown\s+)?(?:image|pixel|"
        r"link|iframe)s?\b|!\[[^\]]{0,80}\]\(\s*https?://[^)\s]*[?&][^)\s]*=[^)\s]*[<{$]",
        re.I,
    ),
    (
        "safety_off",
        r"\b(?:disable|turn\s+off|switch\s+off|deactivate|remove)\s+(?:all\s+|your\s+|the\s+)?"
        r"(?:safety|content\s+filters?|guardrails|approvals?|approval\s+prompts?|sandbox)\b",
        re.I,
    ),
)

#: the basics in other languages, matched on the text without look-alike folding (a Russian
#: word folded to Latin letters would no longer be Russian)
_FOREIGN: tuple[tuple[str, str], ...] = (
    # German
    (
        "override_instructions_de",
        r"\b(?:ignorier\w*|vergiss\w*|vergess\w*|missacht\w*|übergeh\w*|verwirf\w*)\s+"
        r"(?:[\wäöüß]+\s+){0,6}"
        r"[\wäöüß]*(?:anweisungen|anordnungen|regeln|instruktionen|befehle|vorgaben|richtlinien|"
        r"systemanweisung\w*|systemprompt\w*)\b",
    ),
    ("new_instructions_de", r"\bdu\s+bist\s+(?:jetzt|ab\s+sofort|nun)\s+(?:ein|eine|der|die|das)\b"
     r"|\bab\s+(?:jetzt|sofort)\s+(?:musst|sollst|wirst)\s+du\b|\bneue\s+anweisungen\s*:"),
    ("rules_off_de", r"\b(?:beachte|befolge|folge)\w*\s+(?:keine|nicht\s+mehr\s+die)\s+"
     r"[\wäöüß]*(?:regeln|anweisungen|richtlinien|vorgaben)"),
    ("deception_de", r"\b(?:sag|erzähl|verrat)\w*\s+(?:es\s+|das\s+)?(?:dem|der)\s+(?:nutzer|"
     r"benutzer|anwender)\w*\s+nichts\b"),
    # French
    (
        "override_instructions_fr",
        r"\b(?:ignore[rz]?|oublie[rz]?|néglige[rz]?|outrepasse[rz]?)\s+(?:[\wéèêàç'’]+\s+){0,6}"
        r"(?:instructions|consignes|règles|directives|ordres)\b",
    ),
    ("new_instructions_fr", r"\b(?:tu\s+es|vous\s+êtes)\s+(?:maintenant|désormais)\b"
     r"|\bà\s+partir\s+de\s+maintenant,?\s+(?:tu|vous)\b|\bnouvelles\s+instructions\s*:"),
    ("rules_off_fr", r"\b(?:tu\s+n['’]as|vous\s+n['’]avez)\s+plus\s+(?:de|aucune?)\s+"
     r"(?:règles|limites|restrictions|consignes)"),
    ("obey_fr", r"\bob[ée]i(?:s|ssez)[\s-]+(?:moi|à\s+moi|uniquement|seulement)\b"
     r"|\boublie[zr]?\s+tout\s+ce\s+qu"),
    ("deception_fr", r"\bne\s+(?:le\s+|rien\s+)?(?:dis|dites)\s+(?:rien\s+|pas\s+)?à\s+"
     r"l['’]utilisateur\b"),
    # Spanish, Italian, Portuguese
    (
        "override_instructions_es",
        r"\b(?:ignora[rd]?|olvida[rd]?|omite|descarta|desobedece|haz\s+caso\s+omiso\s+(?:a|de)|"
        r"no\s+hagas\s+caso\s+(?:a|de))\s+(?:[\wáéíóúñ]+\s+){0,6}"
        r"(?:instrucciones|reglas|indicaciones|directrices|órdenes|istruzioni|regole|"
        r"instruções|regras)\b",
    ),
    ("new_instructions_es", r"\bahora\s+eres\b|\ba\s+partir\s+de\s+ahora,?\s+(?:eres|debes|tú)\b"
     r"|\bnuevas\s+instrucciones\s*:|\bora\s+sei\b|\bagora\s+você\s+é\b"),
    ("rules_off_es", r"\bno\s+tienes\s+(?:restricciones|reglas|límites|limitaciones)"
     r"|\bdesde\s+ahora,?\s+(?:eres|debes|tú|no\s+tienes)\b"),
    ("obey_es", r"\bobedece\w*\s+(?:solo|solamente|únicamente)\b"
     r"|\bolvida\w*\s+todo\s+lo\s+(?:anterior|previo|que\s+te)"),
    ("deception_es", r"\bno\s+(?:se\s+lo\s+|le\s+)?digas\s+(?:nada\s+)?al\s+usuario\b"),
    # Russian
    (
        "override_instructions_ru",
        r"(?:игнорир\w*|забудь\w*|проигнорир\w*|не\s+обращай\s+внимания\s+на)\s+(?:\w+\s+){0,6}"
        r"(?:инструкци\w*|правил\w*|указани\w*|команд\w*|ограничени\w*)",
    ),
    ("obey_ru", r"\bне\s+(?:следуй|слушай|выполняй|соблюдай)\w*\s+(?:\w+\s+){0,3}"
     r"(?:инструкци\w*|правил\w*|указани\w*)"),
    ("new_instructions_ru", r"\bотныне\s+ты\b|\bты\s+(?:больше\s+)?не\s+ассистент"
     r"|\bты\s+теперь\b|\bтеперь\s+ты\b|\bновые\s+инструкции\s*:"),
    # Chinese
    (
        "override_instructions_zh",
        r"(?:忽略|无视|忘记|忽视)(?:之前|以上|前面|所有|先前|上述)\S{0,6}"
        r"(?:指令|指示|说明|规则|提示)",
    ),
)  # fmt: skip

_FOLDED_COMPILED = tuple((pid, re.compile(p, f)) for pid, p, f in _FOLDED)
_FOREIGN_COMPILED = tuple((pid, re.compile(p, re.IGNORECASE)) for pid, p in _FOREIGN)
_BLOB = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_MAX_BLOBS = 32
_HORIZONTAL = re.compile(r"[^\S\n]+")
_SPACED_WORDS = frozenset(
    [
        "ignore",
        "disregard",
        "forget",
        "override",
        "bypass",
        "previous",
        "prior",
        "instructions",
        "rules",
        "system",
        "prompt",
        "obey",
        "jailbreak",
        "secret",
        "secrets",
        "password",
        "passwords",
    ]
)
_SPACED = re.compile(r"\b(?:\w[ .\-_]){3,}\w\b")  # "i g n o r e", "i.g.n.o.r.e"


def _plain(text: str, invisible_as: str) -> str:
    """NFKC, invisible characters replaced, spaces collapsed; newlines and letters kept."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(invisible_as if untrusted.invisible(ch) else ch for ch in text)
    return _HORIZONTAL.sub(" ", text)


def _joined(spaced: re.Match[str]) -> str:
    """A key word spelled out letter by letter, joined ("i g n o r e"); other runs (a list of
    initials, "a b c d") are left as they are."""
    word = re.sub(r"[ .\-_]", "", spaced.group())
    return word if untrusted.fold(word).lower() in _SPACED_WORDS else spaced.group()


def findings(text: str, reference: Callable[[str], list[str]], depth: int = 0) -> list[str]:
    """The ids of what ``text`` hides from a plain phrase match; ``reference`` is the
    reference's own check, run again on the folded text and on decoded blobs."""
    found: list[str] = []
    # an invisible character inside a word joins it ("ig\u200bnore"); one between words
    # ("ignore\u00adall") separates them: both readings are checked, and letters spaced out
    # one by one are read joined
    plains = [_plain(text, "")]
    if any(untrusted.invisible(ch) for ch in text):
        plains.append(_plain(text, " "))
    if "_" in plains[0]:  # ignore_all_previous_instructions
        plains.append(plains[0].replace("_", " "))
    if _SPACED.search(plains[0]):
        plains.append(_SPACED.sub(_joined, plains[0]))
    for plain in plains:
        folded_lines = "\n".join(untrusted.fold(line) for line in plain.split("\n"))
        found += reference(untrusted.fold(plain))
        found += [pid for pid, pattern in _FOLDED_COMPILED if pattern.search(folded_lines)]
        found += [pid for pid, pattern in _FOREIGN_COMPILED if pattern.search(plain)]
    if depth < 2 and _decoded_findings(_plain(text, ""), reference, depth):
        found.append("base64_payload")
    return list(dict.fromkeys(found))


def _decoded_findings(text: str, reference: Callable[[str], list[str]], depth: int) -> list[str]:
    for blob in _BLOB.findall(text)[:_MAX_BLOBS]:
        # a blob glued to a word ("noteSWdub3Jl…") starts up to three characters late
        for decoded in filter(None, (_decode(blob[skip:]) for skip in range(4))):
            found = reference(decoded) or findings(decoded, reference, depth + 1)
            if found:
                return found
    return []


def _decode(blob: str) -> str | None:
    """``blob`` decoded as base64 (standard or URL-safe) when that gives readable text."""
    bare = blob.rstrip("=")
    padded = bare + "=" * (-len(bare) % 4)
    for alphabet in (b"+/", b"-_"):
        try:
            raw = base64.b64decode(padded, altchars=alphabet, validate=True)
        except (binascii.Error, ValueError):
            continue
        # replaced bytes count as unreadable: a few (a blob glued to a word) are tolerated
        text = raw.decode("utf-8", "replace")
        printable = sum((ch.isprintable() and ch != "\ufffd") or ch in "\n\t" for ch in text)
        if text and printable >= 0.9 * len(text):
            return text
    return None

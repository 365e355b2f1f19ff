#!/usr/bin/python3
"""Write tests/data/wordpiece/multilingual.jsonl: the WordPiece parity corpus (t0240).

Each line {"id": NAME, "text": TEXT}; the texts are spelled here with escapes so the control
characters, combining marks and unassigned code points are visible.  Deterministic.
Run: /usr/bin/python3 tests/data/wordpiece/make_corpus.py > tests/data/wordpiece/multilingual.jsonl
"""
import json

long_word = "a" * 100
cases = [
    ("ascii", "Hello, World! How are you doing today? I'm fine; thanks."),
    ("empty", ""),
    ("spaces", "   \t\n  "),
    ("punct-ascii", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ a$b c+d e<f g=h i^j k`l m|n o~p"),
    ("punct-unicode", "\u00abquoted\u00bb \u201cdouble\u201d \u2018single\u2019 en\u2013dash em\u2014dash \u2026 \u00a1hola! \u00bfqu\u00e9? \u3002\u3001\u300c\u300d"),
    ("symbols-not-punct", "5\u00b0C 3\u00d74 \u00a9 \u00ae \u20ac100 \u00a3 \u00a5 \u2122 \u00b1 \u2264 \u221e \u2190 \u2665"),
    ("accents", "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00e9l\u00e8ve \u00fcber Stra\u00dfe \u00c5ngstr\u00f6m S\u00e3o Paulo \u0141\u00f3d\u017a se\u00f1or"),
    ("decomposed", "cafe\u0301 nai\u0308ve E\u0301COLE A\u030angstro\u0308m"),
    ("combining-alone", "\u0301\u0308 x\u0301\u0301\u0301 \u20dd"),
    ("turkish", "\u0130stanbul I\u0307 \u0131s\u0131k D\u0130YARBAKIR"),
    ("greek", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5! \u0391\u0398\u0397\u039d\u0391 \u03c3\u03bf\u03c6\u03af\u03b1\u03c2 \u1f08\u03b8\u1fc6\u03bd\u03b1\u03b9"),
    ("cyrillic", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041c\u041e\u0421\u041a\u0412\u0410 \u0451\u043b\u043a\u0430 \u0419\u043e\u0433\u0443\u0440\u0442"),
    ("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u061f \u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629\u060c \u0643\u064e\u062a\u064e\u0628\u064e"),
    ("hebrew", "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05dc\u05dd"),
    ("devanagari", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0964"),
    ("thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01"),
    ("cjk", "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8"),
    ("cjk-mixed", "abc\u4e2ddef\u6587123\u5b57 \u3400\u4dbf \U00020000\U0002a6df \uf900 \U0002f800 \u3007"),
    ("cjk-compat", "\uff21\uff22\uff23 \uff11\uff12\uff13 \uff01\uff1f \u30a2\u30a4\u30a6"),
    ("emoji", "I \u2764\ufe0f NY \U0001f600 \U0001f970 \U0001fae0 \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f44d\U0001f3fd \U0001f1eb\U0001f1f7"),
    ("controls", "a\u0000b c\u0001d e\u0007f g\u000bh i\u000cj k\u001bl m\u007fn o\u0085p q\u009fr"),
    ("format-chars", "soft\u00adhyphen zero\u200bwidth join\u200dner bidi\u200eleft\u202aembed\u202c bom\ufeffhere word\u2060joiner"),
    ("whitespace-kinds", "a\tb\nc\rd\u00a0e\u1680f\u2000g\u2009h\u200ai\u2028j\u2029k\u202fl\u205fm\u3000n"),
    ("replacement-char", "bad\ufffdchar \ufffd\ufffd ok"),
    ("private-use", "pua\ue000x \U000f0000y \U00100000z"),
    ("unassigned", "un\u0378assigned \u0380 \U000e0080 x"),
    ("noncharacter", "non\ufdd0char \uffff \U0001fffe"),
    ("long-word-100", long_word),
    ("long-word-101", long_word + "a"),
    ("long-word-100-accents", "\u00e9" * 100),
    ("long-word-101-accents", "e\u0301" * 51),
    ("long-mixed", "x " + "b" * 150 + " y " + "\u4e2d" * 120 + " z"),
    ("unk-inside", "helloxq\u2603world \u2603 hello\u2603"),
    ("numbers", "1234567890 3.14159 1,000,000 2nd 3rd 42nd 0x1F -7 +8 1e10"),
    ("contractions", "don't won't I'm you're they've it's can't shouldn't y'all"),
    ("special-literal", "[MASK] [CLS] [SEP] [PAD] [UNK] x[MASK]y [MASK][MASK] [mask] [ MASK ] [MASK"),
    ("special-case", "[Mask] [cls] [SEP]] [[SEP] <extra_id_0> <extra_id_99> <extra_id_100> <EXTRA_ID_1>x<extra_id_5>y"),
    ("special-spaces", "  [SEP]  \t[CLS]\n"),
    ("urls-code", "https://example.com/path?q=1&r=2#frag user@mail.org def f(x): return x**2 // ok"),
    ("mixed-case", "iPhone McDonald's NASA UNESCO eBay camelCaseWord SCREAMING_SNAKE kebab-case"),
    ("repeated-punct", "Wait...!!! ??? ---- ==== ((nested)) [[x]] {{y}}"),
    ("hashes", "## ##s #hashtag a##b ##"),
    ("math-letters", "\U0001d400\U0001d401 \u2102 \u210c \u2126 \u212a \u00b5 \ufb01 \ufb02 \u2160"),
    ("ligature-and-width", "\ufb00 \ufb03 \uff41\uff42\uff43 \u3000\u3000x"),
    ("sigma", "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3 \u03c3\u03c2\u03a3 \u1e9e"),
    ("nul-only", "\u0000"),
    ("kjv-like", "1 In the beginning God created the heaven and the earth.\n2 And the earth was without form, and void; and darkness was upon the face of the deep."),
]
for name, text in cases:
    print(json.dumps({"id": name, "text": text}, ensure_ascii=True))

#!/usr/bin/python3
"""Generate the hand-assembled test corpora in tests/data:

  unicode.jsonl       Unicode-heavy tokenizer test corpus (scripts, emoji, combining marks,
                      whitespace, digits, contractions, code, special-token strings, long runs)
  added_tokens.jsonl  texts exercising the added tokens of tokenizers/added-tokens.json
                      (lstrip/rstrip, non-special, normalized or not, overlaps)

Usage: /usr/bin/python3 tests/data/make_corpora.py [OUTDIR]   (default: tests/data)

Deterministic: fixed random seed, no input files. NFD forms come from Python's unicodedata
(Python 3.11: Unicode 14.0); the committed unicode.jsonl is the reference, regenerate only on
purpose. Every text is valid Unicode (no lone surrogates); some lines use JSON escapes
(\\uXXXX, surrogate-pair escapes, \\/), extra keys and unusual key order on purpose.
"""
import json
import os
import random
import sys
import unicodedata

rng = random.Random(20261121)
docs = []  # (id, text, style)


def add(id_, text, style="raw"):
    assert isinstance(text, str)
    text.encode("utf-8")  # raises on lone surrogates
    docs.append((id_, text, style))


def nfd(s):
    return unicodedata.normalize("NFD", s)


def rand_from(ranges, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


# --- 1. scripts: short prose ---------------------------------------------------------------
scripts = {
    "latin-fr": "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et de conscience et doivent agir les uns envers les autres dans un esprit de fraternité. « Où est l'hôtel ? » — À côté de la gare, près du cœur de la ville.",
    "latin-de": "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen begabt. Größe, Straße, Fußgänger, Äpfel, Öl, Übermaß; „Anführungszeichen“ und ‚einfache‘. Donaudampfschifffahrtsgesellschaftskapitänsmütze.",
    "latin-misc": "Ça va? Señor Muñoz, ¿qué tal? ¡Olé! Łódź, Kraków, Gdańsk, Wrocław. Dvořák, Škoda, Čapek. Þingvellir, Ísland, Færøerne. İstanbul, ığdır, ŞİŞLİ. Việt Nam, Hà Nội, Thành phố Hồ Chí Minh, người Việt. Ærøskøbing, Ångström, ŒUVRE, straße vs STRASSE, ǅ ǈ ǋ ǲ (titlecase digraphs).",
    "greek": "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα δικαιώματα. Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν. ΑΒΓΔΕ αβγδε ς σ Σ ΐ ΰ ϊ ϋ.",
    "cyrillic": "Все люди рождаются свободными и равными в своём достоинстве и правах. Съешь же ещё этих мягких французских булок, да выпей чаю. Ґанок, їжак, Єва (українська). Љубав, Његош, Ђурђевдан (српски). Ӑӗӳ (чӑвашла).",
    "arabic": "يولد جميع الناس أحرارًا متساوين في الكرامة والحقوق. وقد وهبوا عقلاً وضميرًا وعليهم أن يعامل بعضهم بعضًا بروح الإخاء. بِسْمِ ٱللَّٰهِ ٱلرَّحْمَٰنِ ٱلرَّحِيمِ. الأرقام: ٠١٢٣٤٥٦٧٨٩ و ۰۱۲۳۴۵۶۷۸۹. كلمة‌ای با ZWNJ، ـــــ تطويل.",
    "hebrew": "כל בני האדם נולדו בני חורין ושווים בערכם ובזכויותיהם. בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ. עברית עם English באמצע ו-123 מספרים.",
    "devanagari": "सभी मनुष्यों को गौरव और अधिकारों के मामले में जन्मजात स्वतन्त्रता और समानता प्राप्त है। उन्हें बुद्धि और अन्तरात्मा की देन प्राप्त है। क्षत्रिय, ज्ञान, श्री, द्वार, हिन्दी; अंक: ०१२३४५६७८९।",
    "bengali": "সমস্ত মানুষ স্বাধীনভাবে সমান মর্যাদা এবং অধিকার নিয়ে জন্মগ্রহণ করে। ০১২৩৪৫৬৭৮৯",
    "tamil": "மனிதப் பிறவியினர் சகலரும் சுதந்திரமாகவே பிறக்கின்றனர்; அவர்கள் மதிப்பிலும் உரிமைகளிலும் சமமானவர்கள். தமிழ் எண்கள்: ௦௧௨௩௪௫௬௭௮௯ ௰ ௱ ௲.",
    "telugu-kannada-malayalam": "ప్రతిపత్తిస్వత్వముల విషయమున మానవులెల్లరును జన్మతః స్వతంత్రులును సమానులును నగుదురు. ಎಲ್ಲಾ ಮಾನವರೂ ಸ್ವತಂತ್ರರಾಗಿಯೇ ಜನಿಸಿದ್ದಾರೆ. മനുഷ്യരെല്ലാവരും തുല്യാവകാശങ്ങളോടും അന്തസ്സോടും സ്വാതന്ത്ര്യത്തോടുംകൂടി ജനിച്ചിട്ടുള്ളവരാണ്‌.",
    "thai": "มนุษย์ทั้งหลายเกิดมามีอิสระและเสมอภาคกันในเกียรติศักด์และสิทธิ ต่างมีเหตุผลและมโนธรรม ภาษาไทยไม่มีช่องว่างระหว่างคำ ตัวเลขไทย ๐๑๒๓๔๕๖๗๘๙",
    "lao-khmer-burmese": "ມະນຸດທຸກຄົນເກີດມາມີກຽດ ມີສິດເສລີພາບ. មនុស្សទាំងអស់កើតមកមានសេរីភាព. လူတိုင်းသည် တူညီ လွတ်လပ်သော ဂုဏ်သိက္ခာ ဖြင့်လည်းကောင်း.",
    "tibetan": "འགྲོ་བ་མིའི་རིགས་རྒྱུད་ཡོངས་རྫོགས་ལ་སྐྱེས་ཙམ་ཉིད་ནས་ཆེ་མཐོངས་དང༌། ཐོབ་ཐངགི་རང་དབང་འདྲ་མཉམ་དུ་ཡོད།",
    "cjk-zh": "人人生而自由，在尊严和权利上一律平等。他们赋有理性和良心，并应以兄弟关系的精神相对待。繁體中文：人人生而自由，在尊嚴和權利上一律平等。数字：一二三四五六七八九十百千万亿。「引号」『书名』【括号】〈书〉《名》。",
    "cjk-ja": "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。カタカナ：コンピューター、ゲーム、ヴァイオリン。ﾊﾝｶｸｶﾀｶﾅ ｦｧｨｩｪｫ。ひらがな：あいうえお、ぁぃぅぇぉ、ゔ。漢字かな交じり文。〜ー・",
    "hangul": "모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다. 인간은 천부적으로 이성과 양심을 부여받았으며 서로 형제애의 정신으로 행동하여야 한다. 한글 자모: ㄱㄴㄷㄹㅁㅂㅅ ㅏㅑㅓㅕ. 옛한글: ᄀᆞᆫ",
    "ethiopic": "የሰው ልጅ ሁሉ ሲወለድ ነጻና በክብርና በመብትም እኩልነት ያለው ነው። የተፈጥሮ ማስተዋልና ሕሊና ስላለው አንዱ ሌላውን በወንድማማችነት መንፈስ መመልከት ይገባዋል። ፩፪፫፬፭፮፯፰፱፲",
    "georgian": "ყველა ადამიანი იბადება თავისუფალი და თანასწორი თავისი ღირსებითა და უფლებებით. ᲛᲗᲐᲕᲠᲣᲚᲘ (Mtavruli) ⴀⴁⴂ (Nuskhuri).",
    "armenian": "Բոլոր մարդիկ ծնվում են ազատ ու հավասար իրենց արժանապատվությամբ ու իրավունքներով։ Հայաստան, Երևան, և ﬓ ﬔ (ligatures).",
    "mongolian-syriac-thaana": "ᠬᠦᠮᠦᠨ ᠪᠦᠷ ᠲᠥᠷᠥᠵᠦ ᠮᠡᠨᠳᠡᠯᠡᠬᠦ ᠡᠷᠬᠡ ᠴᠢᠯᠥᠭᠡ. ܟܠ ܒܢܝ̈ ܐܢܫܐ ܡܬܝܠܕܝܢ ܚܐܪ̈ܐ. ހުރިހާ އިންސާނުންވެސް ދުނިޔެއަށް އުފަންވަނީ.",
    "cherokee-canadian-runic": "ᏂᎦᏓ ᎠᏂᏴᏫ ᏂᎨᎫᏓᎸᎾ ᎠᎴ ᎤᏂᏠᏱ. ᐃᓄᐃᑦ ᐊᓂᖅᓯᕐᓂᖅ. ᚠᚢᚦᚨᚱᚲ ᚷᚹᚺᚾᛁᛃ. ᛭ Ogham: ᚁᚂᚃ ᚄ",
    "historic-smp": "𐌰𐍄𐍄𐌰 𐌿𐌽𐍃𐌰𐍂 (Gothic) 𓀀𓀁𓂀 (hieroglyphs) 𒀀𒀁𒀂 (cuneiform) 𐎀𐎁𐎂 (Ugaritic) 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝 𝑰𝒕𝒂𝒍𝒊𝒄 𝟘𝟙𝟚𝟛 (math alphanumerics) 𠀀𠀁𪚥𰀀 (CJK ext).",
    "recent-unicode": "Unicode 13–16 additions: 🫠🫨🫷🫸 🩷🩵🩶 🪿🫎🪼 🫆🫟🫜 (emoji); 𑼀𑼁𑼂 (Kawi, 15.0); 𞓐𞓑𞓒 (Nag Mundari, 15.0); 𐵀𐵁𐵂 (Garay, 16.0); 𖵀𖵁 (Kirat Rai, 16.0); 𑛐𑛑 (Sunuwar, 16.0); 𱍐𱍑 (CJK ext H); 𮯰𮯱 (CJK ext I); ꟀꟁꟐꟑ ꟕ (Latin ext).",
    "mixed-rtl-ltr": "The word \u202bمرحبا\u202c means hello; \u2067שלום\u2069 too. LRM\u200eRLM\u200fALM\u061c. Mixed: abcאבגdef123٤٥٦xyz.",
}
for k, v in scripts.items():
    add("script/" + k, v)

# --- 2. combining marks, normalization forms -----------------------------------------------
pre = "Café naïve résumé coöperate façade jalapeño Ångström Ελληνικά ÿ Ǻ ǻ ṩ ệ ḉ ǖ ȫ Ḝ ĳ ﬁ ﬀ Å Ω K ﬃ ① ²"
add("marks/precomposed", pre)
add("marks/decomposed-nfd", nfd(pre))
add("marks/nfkd-compat", unicodedata.normalize("NFKD", pre))
add("marks/hangul-nfd", nfd("한국어 문장입니다. 가나다라마바사"))
add("marks/vietnamese-nfd", nfd("Tiếng Việt có dấu: Phở, Nguyễn, Đặng, thuở, ướt, ủy ban"))
add("marks/mixed-nfc-nfd-same-line", "e\u0301 é e\u0301e\u0301é\u0301 a\u030a Å Å A\u030a o\u0308\u0304 ȫ")
add("marks/stacked", "a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309 q\u0323\u0307 s\u0323\u0307 ṩ ḍ\u0307 x\u0327\u0328\u0331 n\u0303\u0303\u0303")
add("marks/orphan-marks", "\u0301 starts with a combining mark; \u0308\u0308 two; space then mark \u0301 ; digit 1\u20e3 2\u0336 3\u0338")
zalgo_marks = [chr(c) for c in range(0x0300, 0x036F + 1)]
def zalgo(s, n):
    return "".join(ch + "".join(rng.choice(zalgo_marks) for _ in range(rng.randint(1, n))) for ch in s)
add("marks/zalgo-1", zalgo("He comes. The pony he comes.", 6))
add("marks/zalgo-2", zalgo("ZALGO IS TONY THE PONY", 20))
add("marks/zalgo-heavy", "T" + "".join(rng.choice(zalgo_marks) for _ in range(300)) + "o" + "".join(rng.choice(zalgo_marks) for _ in range(300)) + "ny")
add("marks/indic-virama-zwj", "क्‍ष क्‌ष र्‍य ന്‍ ൻ ক্‍য ශ්‍රී ලංකා")
add("marks/variation-selectors", "☺ ☺\ufe0e ☺\ufe0f ❤ ❤\ufe0f 葛 葛\U000E0100 葛\U000E0101 ↔\ufe0f #\ufe0f 0\ufe0f 字\ufe00")
add("marks/cgj-and-grapheme-joiners", "a\u034fb e\u034f\u0301 \u200c\u200d\u2060\u2061\u2062\u2063\u2064 soft\u00adhyphen")

# --- 3. emoji ----------------------------------------------------------------------------
add("emoji/basic", "😀😃😄😁😆😅😂🤣☺️😊 🙂 🙃 😉 🚀🌍🔥💯✨🎉 👍 👎 ✅ ❌ ⚠️ ♥ ♠ ♣ ♦ ★ ☆")
add("emoji/zwj-families", "👨\u200d👩\u200d👧\u200d👦 👩\u200d👩\u200d👦 👨\u200d👨\u200d👧\u200d👧 👩\u200d❤\ufe0f\u200d💋\u200d👨 🧑\u200d🤝\u200d🧑 👁\ufe0f\u200d🗨\ufe0f 🏳\ufe0f\u200d🌈 🏳\ufe0f\u200d⚧\ufe0f 🐻\u200d❄\ufe0f 🧑\u200d💻 👩🏽\u200d🔬 🧔🏿\u200d♂\ufe0f")
add("emoji/skin-tones", "👋 👋🏻 👋🏼 👋🏽 👋🏾 👋🏿 🤝🏽 🫱🏻\u200d🫲🏿 💪🏾💪🏾💪🏾 🏻🏼🏽🏾🏿 (bare modifiers)")
add("emoji/flags", "🇺🇸 🇬🇧 🇯🇵 🇩🇪 🇫🇷 🇧🇷 🇮🇳 🇨🇳 🇰🇷 🇪🇺 🇺🇳 🇦🇶 🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F 🏴\U000E0067\U000E0062\U000E0077\U000E006C\U000E0073\U000E007F 🇺🇸🇬🇧🇯🇵 (adjacent) 🇦 (lone RI) 🇺🇸🇦")
add("emoji/keycaps", "#\ufe0f\u20e3 *\ufe0f\u20e3 0\ufe0f\u20e3 1\ufe0f\u20e3 2\u20e3 9\ufe0f\u20e3 🔟 1\ufe0f\u20e32\ufe0f\u20e33\ufe0f\u20e3")
add("emoji/dense", "".join(rng.choice("😀🎉🔥💯👍🏽🇯🇵👨\u200d👩\u200d👧🫠❤️✨🚀🌍") for _ in range(400)))
add("emoji/in-words", "I❤️NY, ship🚢it, co-op👩\u200d💻dev, 100💯%, '😀s, don't😀, x😀y😀z, end.🎉")

# --- 4. whitespace, line breaks ------------------------------------------------------------
add("ws/crlf", "line one\r\nline two\r\n\r\nline four\r\n")
add("ws/lone-cr", "cr only\rnext\r\rafter two\r end")
add("ws/mixed-newlines", "a\nb\r\nc\rd\n\n\ne\r\n\r\n\r\nf\n\r\n\rg \n h \r\n i\t\n\tj")
add("ws/spaces-runs", "a b  c   d    e     f      g" + " " * 40 + "h" + " " * 257 + "i " + " " * 3)
add("ws/tabs", "\tindented\n\t\tdouble\n\t \t mixed \t\t\t\t\tend\t")
add("ws/nbsp-etc", "no\u00a0break\u00a0\u00a0space; narrow\u202fnbsp; figure\u2007space; thin\u2009space; hair\u200aspace; em\u2003space; en\u2002space; ideo\u3000space\u3000\u3000x; ogham\u1680mark; mmsp\u205fx")
add("ws/line-sep", "line\u2028separator and paragraph\u2029separator; next-line\u0085NEL; vt\u000bff\u000cfs\u001cgs\u001drs\u001eus\u001f.")
add("ws/zero-width", "zero\u200bwidth\u200bspace, word\u2060joiner, bom\ufeffmid, mvs\u180emongolian, zwnj\u200c zwj\u200d, \u200b\u200b\u200b leading")
add("ws/runs-of-odd-spaces", " \u00a0 \u00a0\u3000 \u2028 \u0085 \u180e \u200b \u2009\u2009 x \t\u00a0\t y \u3000\u3000\u3000 z \u2028\u2028\n\u2029 w")
add("ws/trailing-space", "ends with spaces   ")
add("ws/trailing-newlines", "ends with newlines\n\n\n")
add("ws/leading", "   \n\t leading whitespace")
add("ws/only-spaces", "     ")
add("ws/only-newline", "\n")
add("ws/only-mixed", " \t\n\r\n \u00a0\u3000\u2028\u0085 \t ")
add("ws/only-single-space", " ")
add("ws/empty", "")
add("ws/long-space-run", " " * 3000)
add("ws/long-mixed-run", "x" + "".join(rng.choice([" ", "\t", "\n", "\r\n", "\u00a0", "\u3000"]) for _ in range(1500)) + "y")
add("ws/space-before-newline", "a \nb  \n c \n\n d  \n\n\n  e")

# --- 5. digits -----------------------------------------------------------------------------
add("num/ascii", "0 1 12 123 1234 12345 123456 1234567 12345678 123456789 3.14159 2,718,281 1e10 -42 +7 0x1F 0b1010 1_000_000 10^9 99.9% $5.00 €3,50 ¥1000")
add("num/long-run", "".join(rng.choice("0123456789") for _ in range(1000)))
add("num/digits-in-words", "abc123def 4x4 mp3 h264 2nd 3rd 21st COVID-19 A4 B52s 1990s R2D2 a1b2c3d4e5")
add("num/arabic-indic", "٠١٢٣٤٥٦٧٨٩ ١٢٣٤٥٦٧ ۰۱۲۳۴۵۶۷۸۹ ۱۴۰۲")
add("num/other-digits", "०१२३४५६७८९ ০১২৩ ੦੧੨ ૦૧૨ ୦୧୨ ௦௧௨ ౦౧౨ ೦೧೨ ൦൧൨ ๐๑๒ ໐໑໒ ༠༡༢ ၀၁၂ ០១២ ᠐᠑᠒ ０１２３４５６７８９ 𝟎𝟏𝟐 𝟶𝟷𝟸 🄀🄁 ߀߁߂")
add("num/other-numerics", "x² y³ z¹⁰ H₂O CO₂ ½ ¼ ¾ ⅓ ⅞ Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ ⅰⅱⅲ ① ② ⑳ ⑴ ⒈ ❶ 〇 〡〢〣 𐄇𐄈 ፩፪ ௰ 𒐀 ↉ ⁰¹²³⁴⁵⁶⁷⁸⁹ ₀₁₂₃")
add("num/fullwidth-long", "".join(chr(0xFF10 + rng.randint(0, 9)) for _ in range(100)))
add("num/mixed-scripts", "1٢३৪5６𝟕8٩0 12٣4 ١2٣4")

# --- 6. contractions and apostrophes -------------------------------------------------------
add("contr/lower", "don't won't can't isn't I'm you're we've they'll he'd she's it's y'all o'clock rock'n'roll")
add("contr/upper", "DON'T WON'T CAN'T ISN'T I'M YOU'RE WE'VE THEY'LL HE'D SHE'S IT'S I'LL")
add("contr/mixed-case", "We'Re You'Ve They'Ll I'D It'S Don'T WE'rE we'RE i'lL I'Ll He'D She'S Y'ALL")
add("contr/edge", "'s 't 're 've 'm 'll 'd ' 'x '' ''' 's's 'S'T'RE 'll'll. x's, x'S! x'sx 'st 'ss 'res 'ver 'mm 'lll 'dd '123 '\n's")
add("contr/apostrophe-variants", "don’t DON’T don‘t don`t don´t donʼt donʹt don′t don＇t don\u02bct it’s ’tis ‘quoted’ “double” „low“ «guill» ‹single›")
add("contr/long-s-kelvin", "x'ſ x'ſt X'ſS x'K x'Ḱ I'ŀl A'ß a'ﬅ 'ſ 'ﬆ 'İ 'ı 'Ⅿ")
add("contr/unicode-letters", "l'été L'ÉTÉ d'où D'OÙ n'est N'EST dell'arte DELL'ARTE o'ʻo Hawaiʻi")

# --- 7. code, URLs, markup, JSON-ish ------------------------------------------------------
add("code/c", '#include <stdio.h>\n\nint main(int argc, char **argv) {\n\tfor (int i = 0; i < argc; i++) {\n\t\tprintf("%d: %s\\n", i, argv[i]);\n\t}\n\treturn 0; // done\n}\n')
add("code/python", 'def f(x: int = 3, *args, **kw) -> dict[str, int]:\n    """Docstring with \'quotes\' and "doubles"."""\n    return {k: v ** 2 for k, v in kw.items() if v != 0}  # comment\n\nif __name__ == "__main__":\n    print(f(1, a=2), end="\\r\\n")\n')
add("code/js-json", 'const o = {"a": [1, 2.5e-3, null, true], "b\\"c": "\\u00e9\\n"}; // JSON.stringify(o) === \'{"a":[1,0.0025,null,true]}\'\nfetch(`https://x.y/z?q=${encodeURIComponent(s)}&n=10`).then(r => r.json());')
add("code/shell", "#!/bin/sh\nset -eu\nfor f in *.txt; do\n  [ -f \"$f\" ] && wc -l -- \"$f\" | awk '{print $1}' >> /tmp/out.$$ 2>&1\ndone\necho \"${HOME:-/root}\" | sed -e 's/\\//_/g'\n")
add("code/rust-cpp", "fn main() { let v: Vec<u8> = b\"\\xff\\x00\".to_vec(); println!(\"{:?}\", v); }\ntemplate<typename T> auto f(T&& t) -> decltype(t) { return std::forward<T>(t); } // a->b, a::b, a<=>b, a>>=1, !==, ===, ...\n")
add("code/indentation", "\n".join("    " * d + f"level_{d} = {d}" for d in range(12)) + "\n" + "\n".join("\t" * d + "x" for d in range(8)))
add("code/urls", "https://example.com/path/to/page?query=value&other=1#frag http://user:pw@[::1]:8080/ ftp://ftp.example.org/pub/ mailto:a.b+c@example.co.uk www.EXAMPLE.com/ÄÖÜ https://xn--nxasmq6b.com/ https://例え.jp/パス?q=日本 file:///C:/Users/x/My%20Docs/a.txt")
add("code/html-md", "<p class=\"x\">Hello &amp; goodbye &lt;3 &#x1F600; &nbsp;</p>\n# Title\n\n* item **bold** _it_ `code` [link](http://a.b)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nprint('hi')\n```\n<!-- comment -->")
add("code/latex", "\\begin{equation} \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation} $\\alpha_i \\leq \\beta^{(n)}$ \\\\ \\textbf{Bold} 100\\% \\$5")
add("code/json-in-text", '{"key": "value", "nested": {"arr": [1, "two", {"three": 3}], "esc": "a\\"b\\\\c\\/d\\u0041\\ud83d\\ude00"}, "empty": "", "null": null}')
add("code/regexy", r"^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*)@\p{L}+\s*(?!\S)$ \\d{1,3} [^\r\n] (?i:'s|'t)")
add("code/punctuation-runs", "!!!??? ... …… ---- –– —— ==== #### **** //// \\\\\\\\ |||| ~~~~ ^^^^ ____ :::: ;;;; ,,,, '''' \"\"\"\" ```` ()()() [][][] {}{}{} <><><> ¡¿ «» ‽ ⁂ § ¶ † ‡ • ‰ ′ ″ ‴")
add("code/punct-newline", "a.\nb!\r\nc?\n\nd;\r\re:\n\n\n/\n/x\n .\n")
add("code/base64-hex", "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg== sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 uuid 123e4567-e89b-12d3-a456-426614174000")

# --- 8. special-token strings inside text ---------------------------------------------------
add("special/endoftext", "Document one.<|endoftext|>Document two. <|endoftext|> spaced <|endoftext|>\n<|endoftext|>")
add("special/only-endoftext", "<|endoftext|>")
add("special/repeated", "<|endoftext|><|endoftext|><|endoftext|>")
add("special/partial", "<|endoftext| <|endoftext <endoftext|> |endoftext|> <|ENDOFTEXT|> < |endoftext|> <|endof text|> <<|endoftext|>> <|<|endoftext|>|>")
add("special/others", "<|fim_prefix|>def f():<|fim_suffix|>    return 1<|fim_middle|>    x = 2 <|endofprompt|> <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|> <s> </s> [CLS] [SEP] <mask> <pad> <unk>")
add("special/llama", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|end_of_text|>")

# --- 9. long and repetitive -------------------------------------------------------------------
letters = "abcdefghijklmnopqrstuvwxyz"
add("long/word-5000-random", "".join(rng.choice(letters) for _ in range(5000)))
add("long/word-5000-same", "a" * 5000)
add("long/word-mixedcase", "".join(rng.choice(letters + letters.upper()) for _ in range(3000)))
add("long/cjk-3000", rand_from([(0x4E00, 0x9FFF)], 3000))
add("long/hiragana-2000", rand_from([(0x3041, 0x3096)], 2000))
add("long/cyrillic-word-2000", rand_from([(0x0430, 0x044F)], 2000))
add("long/thai-2000", rand_from([(0x0E01, 0x0E3A), (0x0E40, 0x0E4E)], 2000))
add("long/repeat-punct", "!" * 2000 + "?" * 1000 + "." * 1000)
add("long/repeat-dash-equal", "-" * 500 + "\n" + "=" * 500 + "\n" + "_" * 500 + "\n" + "*" * 500)
add("long/repeat-emoji", "😀" * 500)
add("long/repeat-ab", "ab" * 1500)
add("long/repeat-word-space", "the " * 1000)
add("long/repeat-newlines", "\n" * 1000)
add("long/repeat-crlf", "\r\n" * 500)
add("long/repeat-cjk-char", "の" * 1000 + "ー" * 500)
add("long/repeat-combining", "e" + "\u0301" * 2000)
add("long/lorem", " ".join(rng.choice("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua".split()) for _ in range(1500)))

# --- 10. controls, odd code points ---------------------------------------------------------
add("ctrl/c0", "".join(chr(c) for c in range(0x01, 0x20)) + " nul:\u0000: del:\u007f:")
add("ctrl/nul-inside", "before\u0000after\u0000\u0000end")
add("ctrl/c1", "".join(chr(c) for c in range(0x80, 0xA0)))
add("ctrl/bom-start", "\ufeffstarts with BOM")
add("ctrl/noncharacters", "\ufdd0 \ufdef \ufffe \uffff \U0001FFFE \U0001FFFF \U0010FFFE \U0010FFFF \ufffd replacement")
add("ctrl/private-use", "\ue000\ue001\uf8ff \U000F0000\U000FFFFD \U00100000\U0010FFFD")
add("ctrl/unassigned", "\u0378\u0379 \u08b5 \U0002FFFF \U000E0080 \U0003134B\U0003134A \U00050000")
add("ctrl/tags-and-vs", "\U000E0001\U000E0020\U000E0041\U000E007F \U000E0100\U000E01EF")
add("ctrl/surrogate-boundaries", "\ud7ff\ue000 \U00010000 \U0010ffff \u07ff\u0800 \u007f\u0080 \uffff\U00010000")

# --- 11. random Unicode soup -----------------------------------------------------------------
soup_ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x530, 0x58F), (0x590, 0x5FF),
               (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x10A0, 0x10FF), (0x1200, 0x137F),
               (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x214F), (0x2190, 0x21FF), (0x2200, 0x22FF),
               (0x2500, 0x257F), (0x3000, 0x303F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
               (0xFF00, 0xFFEF), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF), (0x1D400, 0x1D7FF), (0x20000, 0x2A6DF)]
for i in range(24):
    n = rng.randint(50, 600)
    s = rand_from(soup_ranges, n)
    # sprinkle ASCII spaces/newlines
    s = "".join(ch if rng.random() > 0.12 else rng.choice([" ", " ", "\n", "  ", "\t"]) for ch in s)
    add(f"soup/{i:02d}", s)
# byte-ish soup: all BMP chars in a dense block each, to hit many byte tokens
add("soup/all-latin1", "".join(chr(c) for c in range(0xA0, 0x100)))
add("soup/all-ascii-printable", "".join(chr(c) for c in range(0x20, 0x7F)))
add("soup/ascii-shuffled", "".join(rng.choice([chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t"]) for _ in range(3000)))

# --- 12. realistic mixed paragraphs -----------------------------------------------------------
add("mixed/multilingual-paragraph", "In 2024, the 東京 office (東京オフィス) hired 12 engineers — 3 from São Paulo, 4 from Москва, and 5 from दिल्ली. Budget: €1.2M (≈ ¥190M). Contact: info@example.jp ☎ +81-3-1234-5678. 😊\n\nFeedback: «Très bien!» / „Sehr gut!“ / «Отлично!» / 「とても良い！」 / 『很好』 / 아주 좋아요! / ممتاز! / מצוין!")
add("mixed/chat", "User: hey!! how r u?? 😂😂\nBot: I'm fine, thanks :) What's up?\nUser: nm... just \"testing\" the tokenizer w/ weird stuff ¯\\_(ツ)_/¯ (╯°□°)╯︵ ┻━┻ ( ͡° ͜ʖ ͡°)\n")
add("mixed/table-box-drawing", "┌──────┬──────┐\n│ name │ qty  │\n├──────┼──────┤\n│ äpfel│  12  │\n│ 梨   │ ３   │\n└──────┴──────┘")
add("mixed/math", "∀x∈ℝ: x² ≥ 0; ∑ᵢ₌₁ⁿ i = n(n+1)/2; ∫∮∂∇ ≠ ≈ ≡ ≤ ≥ ∞ √2 ∛8 π≈3.14159 ℵ₀ ⊂⊆⊄ ∧∨¬ → ⇒ ⟺ 𝔼[X] = μ ± σ")
add("mixed/currency-units", "$100 €200 £300 ¥400 ₹500 ₽600 ₩700 ₿0.01 ¢ ₫ ₪ ₴ ₺ ₸ 5 km/h 20°C 68°F 3µm 10Ω 5㎏ ㎞ ㏄ ℃ ℉")

# --- 13. lines written with JSON escapes / unusual layout ------------------------------------
escaped_texts = [
    ("esc/ascii-escaped-cjk", "人人生而自由 😀 émoji 👨‍👩‍👧 \u2028 \u0085 end"),
    ("esc/ascii-escaped-all", "tab\tnl\ncr\rquote\"backslash\\slash/ bell\u0007 nul\u0000 del\u007f"),
    ("esc/ascii-escaped-astral", "𝄞 music 𓀀 hieroglyph 🇯🇵 flag \U0010FFFF max"),
]
for id_, t in escaped_texts:
    add(id_, t, style="ascii")
add("esc/slash-escapes", "a/b/c </script> http://x/y", style="slash")
add("esc/key-order-and-extra", "text after other keys, with extra nested keys", style="reorder")
add("esc/spaces-around", "whitespace around tokens of the JSON line", style="spaced")
add("esc/uppercase-hex", "Upper-case \u00C9\u00E9 hex escapes \U0001F600", style="upperhex")
add("esc/duplicate-free-unicode-key", "a key with non-ASCII text and an id that is a number", style="numid")


def dump(id_, text, style):
    if style == "raw":
        return json.dumps({"id": id_, "text": text}, ensure_ascii=False)
    if style == "ascii":
        return json.dumps({"id": id_, "text": text}, ensure_ascii=True)
    if style == "slash":
        return json.dumps({"id": id_, "text": text}, ensure_ascii=False).replace("/", "\\/")
    if style == "reorder":
        return json.dumps({"meta": {"text": "not this one", "list": [1, 2, {"text": "nor this"}]},
                           "id": id_, "n": 1.5e3, "ok": True, "none": None, "text": text}, ensure_ascii=False)
    if style == "spaced":
        return '  { "id" : ' + json.dumps(id_) + ' ,\t"text"\t:\t' + json.dumps(text, ensure_ascii=False) + ' }  '
    if style == "upperhex":
        body = json.dumps(text, ensure_ascii=True)
        import re
        body = re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), body)
        return '{"id": ' + json.dumps(id_) + ', "text": ' + body + '}'
    if style == "numid":
        return json.dumps({"id": 12345, "ключ": "значение", "text": text}, ensure_ascii=False)
    raise ValueError(style)



added = [
    ("mask/alone", "<mask>"),
    ("mask/spaces", "a <mask> b"),
    ("mask/many-spaces", "a   <mask>   b"),
    ("mask/newline-tab", "a\n\t <mask>b"),
    ("mask/glued", "a<mask>b"),
    ("mask/twice", "<mask><mask> <mask>  <mask>"),
    ("mask/leading-space", " <mask>"),
    ("mask/unicode-ws", "x \u00a0<mask> y\u3000<mask> z\u2028<mask> w\u0085<mask> v\u200b<mask> u\u180e<mask>"),
    ("mask/case", "<MASK> <Mask> < mask> <mask >"),
    ("sep/spaces", "a <sep>   b"),
    ("sep/newlines", "a<sep>\n\nb"),
    ("sep/trailing", "<sep> "),
    ("sep/unicode-ws", "<sep>\u2028x <sep>\u00a0\u3000y <sep>\r\nz"),
    ("both/spaces", "a  <both>  b"),
    ("both/only", "  <both>  "),
    ("both/newlines", "\n<both>\n"),
    ("both/adjacent", "x <both> <both> <mask> <sep> y"),
    ("user/basic", "<user> hi"),
    ("user/glued", "x<user>y<user>"),
    ("user/case", "<USER> <User>"),
    ("hw/basic", "say hello world!"),
    ("hw/two-spaces", "say hello  world"),
    ("hw/prefix-of-word", "hello worldwide, ahello world"),
    ("hw/capital", "Hello world, HELLO WORLD"),
    ("hello/alone", "Hello"),
    ("hello/twice", "HelloHello"),
    ("hello/space-before", " Hello, world. Say Hello."),
    ("hello/in-word", "sayHello Helloween"),
    ("cafe/precomposed", "un café, deux cafés"),
    ("cafe/decomposed", "un cafe\u0301, deux cafe\u0301s"),
    ("cafe/upper", "CAFÉ Café"),
    ("naive/precomposed", "naïve naïvety"),
    ("naive/decomposed", "nai\u0308ve nai\u0308vety"),
    ("overlap/a", "<|a|>"),
    ("overlap/ab", "<|a|><|b|>"),
    ("overlap/aab", "<|a|><|a|><|b|><|b|>"),
    ("overlap/spaced", "<|a|> <|b|>"),
    ("overlap/b", "<|b|>"),
    ("spaced/basic", "a spaced b"),
    ("spaced/double", "x spaced  y  spaced z"),
    ("spaced/alone", " spaced "),
    ("spaced/no-spaces", "spaced"),
    ("bos-eos/in-text", "<bos>text<eos> <bos> <eos>"),
    ("lstrip-ns/basic", "a   <lstrip-ns> b\t<lstrip-ns>"),
    ("rstrip-ns/basic", "a <rstrip-ns>   b <rstrip-ns>\n"),
    ("eot/basic", "one<|endoftext|>two <|endoftext|> three"),
    ("mixed/all", "Hello <mask> world <sep> café <both> naïve <|a|><|b|> hello world<user> spaced <|endoftext|>"),
    ("mixed/dense", "<mask><sep><both><user><|a|><|b|>Hello<bos><eos><lstrip-ns><rstrip-ns>"),
    ("empty", ""),
    ("ws-only", "   "),
    ("ws-around-mask", "  <mask>  "),
]


def write(path, items):
    ids = set()
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for id_, text, style in items:
            assert id_ not in ids, id_
            ids.add(id_)
            text.encode("utf-8")
            line = dump(id_, text, style)
            assert "\n" not in line and "\r" not in line
            assert json.loads(line)["text"] == text
            f.write(line + "\n")
    print(f"{path}: {len(items)} lines", file=sys.stderr)


outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
write(os.path.join(outdir, "unicode.jsonl"), docs)
write(os.path.join(outdir, "added_tokens.jsonl"), [(i, t, "raw") for i, t in added])


# --- malformed / edge-case inputs ----------------------------------------------------------------
def wbytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def jl(text, id_):
    return json.dumps({"id": id_, "text": text}, ensure_ascii=False).encode("utf-8") + b"\n"


ok = [jl(t, f"doc{i + 1}") for i, t in enumerate(["first line", "second line", "third line", "fourth line", "fifth line"])]
bad = os.path.join(outdir, "bad")
wbytes(os.path.join(bad, "malformed-json-line3.jsonl"), ok[0] + ok[1] + b'{"id": "doc3", "text": "unterminated}\n' + ok[3] + ok[4])
wbytes(os.path.join(bad, "trailing-garbage-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "x"} trailing\n' + ok[2])
wbytes(os.path.join(bad, "two-objects-line2.jsonl"), ok[0] + b'{"text": "a"}{"text": "b"}\n' + ok[2])
wbytes(os.path.join(bad, "not-object-line2.jsonl"), ok[0] + b'["text", "a list, not an object"]\n' + ok[2])
wbytes(os.path.join(bad, "bare-string-line2.jsonl"), ok[0] + b'"text"\n' + ok[2])
wbytes(os.path.join(bad, "missing-key-line2.jsonl"), ok[0] + b'{"id": "doc2", "txt": "wrong key"}\n' + ok[2])
wbytes(os.path.join(bad, "value-number-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": 42}\n' + ok[2])
wbytes(os.path.join(bad, "value-null-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": null}\n' + ok[2])
wbytes(os.path.join(bad, "value-list-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": ["a", "b"]}\n' + ok[2])
wbytes(os.path.join(bad, "value-object-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": {"text": "a"}}\n' + ok[2])
wbytes(os.path.join(bad, "value-bool-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": true}\n' + ok[2])
wbytes(os.path.join(bad, "invalid-utf8-ff-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "bad \xff byte"}\n' + ok[2])
wbytes(os.path.join(bad, "invalid-utf8-truncated-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "cut \xe2\x82 euro"}\n' + ok[2])
wbytes(os.path.join(bad, "invalid-utf8-overlong-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "overlong \xc0\xaf slash"}\n' + ok[2])
wbytes(os.path.join(bad, "invalid-utf8-surrogate-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "encoded surrogate \xed\xa0\x80"}\n' + ok[2])
wbytes(os.path.join(bad, "invalid-utf8-continuation-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "lone \x80 continuation"}\n' + ok[2])
wbytes(os.path.join(bad, "invalid-utf8-above-10ffff-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "too big \xf4\x90\x80\x80"}\n' + ok[2])
wbytes(os.path.join(bad, "invalid-utf8-outside-string-line2.jsonl"), ok[0] + b'{"id": "doc2\xff", "text": "fine"}\n' + ok[2])
wbytes(os.path.join(bad, "lone-surrogate-escape-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "lone \\ud800 high"}\n' + ok[2])
wbytes(os.path.join(bad, "lone-low-surrogate-escape-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "lone \\udc00 low"}\n' + ok[2])
wbytes(os.path.join(bad, "bad-escape-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "bad \\x41 escape"}\n' + ok[2])
wbytes(os.path.join(bad, "raw-control-char-line2.jsonl"), ok[0] + b'{"id": "doc2", "text": "raw\ttab"}\n' + ok[2])
wbytes(os.path.join(bad, "blank-line-middle.jsonl"), ok[0] + ok[1] + b"\n" + ok[3] + ok[4])
wbytes(os.path.join(bad, "whitespace-line-middle.jsonl"), ok[0] + b"   \t \n" + ok[2])
wbytes(os.path.join(bad, "truncated-last-line.jsonl"), ok[0] + ok[1] + b'{"id": "doc3", "te')
wbytes(os.path.join(bad, "bom.jsonl"), b"\xef\xbb\xbf" + ok[0] + ok[1])
wbytes(os.path.join(bad, "empty.jsonl"), b"")
wbytes(os.path.join(bad, "only-newline.jsonl"), b"\n")
# truncated zstd stream: compress 200 lines at level 19, keep the first half of the bytes
import subprocess
payload = b"".join(jl(f"document number {i} " + "lorem ipsum " * (i % 17), f"d{i}") for i in range(200))
z = subprocess.run(["zstd", "-19", "-q", "-c"], input=payload, stdout=subprocess.PIPE, check=True).stdout
wbytes(os.path.join(bad, "truncated.jsonl.zst"), z[: len(z) // 2])
wbytes(os.path.join(bad, "not-zstd.jsonl.zst"), b"this is not a zstd frame\n")

edge = os.path.join(outdir, "edge")
wbytes(os.path.join(edge, "no-final-newline.jsonl"), ok[0] + ok[1] + ok[2].rstrip(b"\n"))
wbytes(os.path.join(edge, "crlf.jsonl"), b"".join(l.rstrip(b"\n") + b"\r\n" for l in ok))
wbytes(os.path.join(edge, "duplicate-key.jsonl"), b'{"text": "first value", "text": "second value wins"}\n')
wbytes(os.path.join(edge, "key-in-nested.jsonl"), b'{"meta": {"text": "nested, not this"}, "text": "top-level"}\n{"text": "only", "extra": [{"text": 1}]}\n')
wbytes(os.path.join(edge, "other-key.jsonl"), b'{"text": 5, "content": "read with --key content"}\n{"content": "second", "text": null}\n')
wbytes(os.path.join(edge, "escaped-nul.jsonl"), b'{"text": "a\\u0000b"}\n{"text": "\\u0000"}\n')
wbytes(os.path.join(edge, "empty-text.jsonl"), b'{"text": ""}\n{"text": ""}\n{"text": "x"}\n{"text": ""}\n')
wbytes(os.path.join(edge, "list-value.jsonl"), b'{"text": ["Hel", "lo", " world", "", "!"]}\n{"text": []}\n{"text": ["<|endoftext|>", "x"]}\n')
wbytes(os.path.join(edge, "single.jsonl.zst"), subprocess.run(["zstd", "-19", "-q", "-c"], input=ok[0], stdout=subprocess.PIPE, check=True).stdout)
wbytes(os.path.join(edge, "multi-frame.jsonl.zst"),
       b"".join(subprocess.run(["zstd", "-3", "-q", "-c"], input=l, stdout=subprocess.PIPE, check=True).stdout for l in ok))
print(f"{bad}, {edge}: written", file=sys.stderr)

#!/usr/bin/env python3
"""Deterministic tokenizer test corpus.

    python3 scripts/gen_tokenizer_corpus.py OUT_DIR [--scale N]

Writes OUT_DIR/conformance/*.txt (valid UTF-8, compared id for id with the reference tokenizer)
and OUT_DIR/roundtrip/*.bin (ill-formed UTF-8 and raw bytes, which the reference cannot read;
checked for decode(encode(x)) == x only). About 1.3 MB at --scale 1 (the default). The output
depends only on the seed: standard library only, no hash-ordered containers.

Characters picked at random come from the Unicode 3.2 database that every Python carries
(unicodedata.ucd_3_2_0), so the corpus does not change with the Python version and contains no
code point that a regex engine with older Unicode tables than the reference would classify
differently. Hand-written samples use only characters assigned by Unicode 14.

No file contains a special-token literal ("<｜...｜>", "<think>", "</think>", "｜DSML｜",
"<|EOT|>"); those cases live in tests/tokenizer/data/special_cases.json.
"""

import argparse
import base64
import json
import os
import random
import sys
import unicodedata

UCD = unicodedata.ucd_3_2_0

# --------------------------------------------------------------------------------------------
# Hand-written samples
# --------------------------------------------------------------------------------------------

ENGLISH_WORDS = (
    "the of and to in is was for that with as on by at from his her they we you it this which "
    "an be are or not but had have has were been one all would there their what so up out if "
    "about who get go me when make can like time no just him know take people into year your "
    "good some could them see other than then now look only come its over think also back after "
    "use two how our work first well way even new want because any these give day most us "
    "tokenizer model inference engine weights tensor matrix kernel cache prefix sampling "
    "temperature latency throughput attention expert router embedding vocabulary merge rank "
    "byte pair encoding Unicode character whitespace newline paragraph sentence grammar "
    "mountain river window garden kitchen morning evening winter summer library museum "
    "quickly slowly carefully brightly quietly suddenly honestly rarely always never "
    "Magnetar DeepSeek JSON HTTP CPU GPU CUDA AVX2 NaN iPhone eBay McDonald O'Brien "
    "naïve café résumé coöperate façade jalapeño piñata Zürich Ångström déjà-vu"
).split()

CONTRACTIONS = ("it's don't won't can't I'm I'll we've they're she'd you'd he's "
                "IT'S DON'T WE'LL y'all o'clock rock'n'roll 'tis ma'am").split()

PUNCT_BITS = [", ", "; ", ": ", " - ", " -- ", " \u2014 ", "\u2014", " \u2013 ", "... ", "\u2026 ",
              " (", ") ", " [", "] ", " {", "} ", "/", " & ", " @", " #", "!? ", "?! ", "!!! ",
              " \"", "\" ", " \u201c", "\u201d ", " \u2018", "\u2019 ", " \u00ab", "\u00bb ",
              " \u201e", " * ", " ~", "`", " | ", " \\ ", " ^", " %", " +", " =", " <", "> ",
              " \u00a7", " \u00b6", " \u2022 ", " \u00b0", " \u00a9", " \u2122", " \u20ac", " \u00a3"]

MULTILINGUAL = {
    "zh": ["今天天气很好，我们去公园散步吧。", "机器学习模型需要大量的数据进行训练。",
           "这个分词器把文本切成小片段，然后合并字节对。", "他说：“你好，世界！”然后笑了。",
           "人工智能正在改变我们的生活方式和工作方式。", "北京、上海、广州和深圳都是大城市。",
           "龘靐齉齾爩鱻麤龗灪吁龖厵滟爨癵驫鲡鲤", "繁體中文：這是一個測試句子，包含標點符號。"],
    "ja": ["今日はとても良い天気ですね。", "カタカナとひらがなと漢字を混ぜて書きます。",
           "東京タワーの高さは三百三十三メートルです。", "ｶﾀｶﾅの半角文字も時々使われます。",
           "「吾輩は猫である。名前はまだ無い。」", "ヴァイオリンとチェロのコンサートに行きました。",
           "ゟ゠ヿ・ーヽヾゝゞ〃々〆〇"],
    "ko": ["안녕하세요, 만나서 반갑습니다.", "한국어는 한글로 쓰고 띄어쓰기를 합니다.",
           "토큰화는 문장을 작은 조각으로 나누는 과정입니다.", "서울특별시 종로구 세종대로 175"],
    "vi": ["Tiếng Việt có nhiều dấu thanh và dấu phụ.", "Hôm nay trời đẹp, chúng ta đi dạo nhé!",
           "Người Việt Nam rất thích ăn phở và bánh mì.", "Đường phố Hà Nội đông đúc vào buổi sáng.",
           "Trường đại học Bách khoa được thành lập năm 1956."],
    "ar": ["مرحبا بالعالم، هذا اختبار للمحلل.", "اللُّغَةُ العَرَبِيَّةُ جَمِيلَةٌ جِدًّا.",
           "ذهب الطالب إلى المدرسة في الصباح الباكر.", "الرقم ١٢٣٤٥ مكتوب بالأرقام العربية الهندية.",
           "قال: «السلام عليكم» ثم جلس؟"],
    "fa": ["زبان فارسی با خط عربی نوشته می‌شود.", "سال ۱۴۰۲ خورشیدی سال خوبی بود."],
    "he": ["שלום עולם, זהו מבחן.", "בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ.",
           "המחשב עובד מהר מאוד היום."],
    "ru": ["Съешь же ещё этих мягких французских булок, да выпей чаю.",
           "Токенизатор разбивает текст на части.", "Москва — столица России, ей более 870 лет.",
           "«Ёлки-палки», — сказал он."],
    "uk": ["Україна має багату історію та культуру.", "Ґанок, їжак, єнот і пісня."],
    "el": ["Γειά σου κόσμε! Αυτό είναι ένα τεστ.", "Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν.",
           "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας;"],
    "hi": ["नमस्ते दुनिया, यह एक परीक्षण है।", "भारत एक विशाल और विविधतापूर्ण देश है।",
           "संख्याएँ ०१२३४५६७८९ देवनागरी में।", "क्षत्रिय ज्ञान श्रृंगार द्वार"],
    "bn": ["আমি বাংলায় গান গাই।", "বাংলাদেশের রাজধানী ঢাকা।"],
    "ta": ["வணக்கம் உலகம்.", "தமிழ் மொழி மிகவும் பழமையானது."],
    "th": ["สวัสดีครับ ยินดีที่ได้รู้จัก", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "เลขไทย ๐๑๒๓๔๕"],
    "ka": ["გამარჯობა მსოფლიო.", "საქართველოს დედაქალაქი თბილისია."],
    "hy": ["Բարեւ աշխարհ։", "Հայաստանի մայրաքաղաքը Երեւանն է։"],
    "tr": ["Türkçe'de ı, İ, ş, ğ ve ç harfleri vardır.", "İstanbul'da yaşıyorum."],
    "de": ["Größere Übungen für Äpfel und Öl; Straße, Maß.", "Donaudampfschifffahrtsgesellschaftskapitän."],
    "fr": ["L'été dernier, j'ai visité Paris — c'était génial !", "Œuvre, cœur, naïveté, « guillemets »."],
    "es": ["¿Dónde está la biblioteca? ¡Allí!", "El pingüino comió jalapeños en la mañana."],
    "pl": ["Zażółć gęślą jaźń.", "Wrocław, Łódź i Gdańsk to piękne miasta."],
    "cs": ["Příliš žluťoučký kůň úpěl ďábelské ódy.", "Čeština má háčky a čárky."],
    "is": ["Þetta er íslenska; ð og þ eru stafir.", "Ærið fjör á Íslandi."],
    "am": ["ሰላም ለዓለም።", "ኢትዮጵያ በአፍሪካ ትገኛለች።"],
    "km": ["សួស្តី ពិភពលោក។", "ភាសាខ្មែរ"],
    "my": ["မင်္ဂလာပါ ကမ္ဘာ။", "မြန်မာဘာသာစကား"],
    "bo": ["བཀྲ་ཤིས་བདེ་ལེགས།", "བོད་ཡིག"],
    "si": ["ආයුබෝවන් ලෝකය.", "සිංහල භාෂාව"],
    "mn": ["ᠮᠣᠩᠭᠣᠯ ᠬᠡᠯᠡ", "Монгол хэл"],
    "ml": ["നമസ്കാരം ലോകം.", "മലയാളം"],
    "sa": ["॥ ॐ नमः शिवाय ॥", "सत्यमेव जयते।"],
}

# Emoji from Unicode 13 or earlier.
EMOJI = ["😀", "😂", "🤣", "😍", "🥰", "😎", "🤖", "👾", "🎉", "🔥", "💯", "✨", "⭐", "🌍", "🚀",
         "🍕", "🍣", "☕", "🐍", "🦀", "🐧", "❤️", "💔", "✅", "❌", "⚠️", "♻️", "☺️", "☺︎", "✌🏽",
         "👍", "👍🏻", "👍🏿", "👋🏼", "🙏🏾", "👨‍💻", "👩‍🔬", "🧑‍🚀", "👨‍👩‍👧‍👦", "👩‍❤️‍👨", "🏳️‍🌈",
         "🏴‍☠️", "🇺🇸", "🇯🇵", "🇩🇪", "🇧🇷", "🇮🇳", "🇪🇺", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "*️⃣", "🔟",
         "🅰️", "Ⓜ️", "©️", "®️", "™️", "〰️", "〽️", "🀄", "🃏", "🧬", "🦾", "🪐", "🥲", "🫀"]

SYMBOLS = ("★☆♠♣♥♦♪♫☀☁☂☃☎☑☒✓✗✔✘→←↑↓↔↕⇒⇔∀∃∅∇∈∉∋∏∑−∓∗√∝∞∠∧∨∩∪∫∮≈≠≡≤≥⊂⊃⊆⊇⊕⊗⊥⋅"
           "─│┌┐└┘├┤┬┴┼═║╔╗╚╝▀▄█▌▐░▒▓■□▪▫▬▲►▼◄◆◇○●◎◐◑⠁⠃⠉⠙⠑⠋⠛⠓⠊⠚€£¥¢₹₽₩₿฿"
           "°±²³µ¶·¹º¼½¾×÷ǅǈǋǲʰʱʲˆˇˈˉ˘˙˚˛˜˝")

# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------


def assigned(cp):
    """True for code points with a character in Unicode 3.2 (surrogates excluded)."""
    if 0xD800 <= cp <= 0xDFFF:
        return False
    return UCD.category(chr(cp)) != "Cn"


def random_char(rng, lo, hi):
    for _ in range(1000):
        cp = rng.randint(lo, hi)
        if assigned(cp):
            return chr(cp)
    return "?"


def chars_of_category(cats, lo=0, hi=0x10FFFF):
    return [chr(cp) for cp in range(lo, hi + 1)
            if assigned(cp) and UCD.category(chr(cp)) in cats]


def sentence(rng, words, n_min=4, n_max=18):
    n = rng.randint(n_min, n_max)
    out = []
    for i in range(n):
        w = rng.choice(words)
        r = rng.random()
        if r < 0.05:
            w = w.upper()
        elif r < 0.15 or i == 0:
            w = w[:1].upper() + w[1:]
        elif r < 0.2:
            w = rng.choice(CONTRACTIONS)
        out.append(w)
        if i + 1 < n and rng.random() < 0.12:
            out.append(rng.choice(PUNCT_BITS).strip() or ",")
    s = " ".join(out)
    return s + rng.choice([".", ".", ".", "!", "?", "...", "\u2026", ":", ";", "?!"])


def ident(rng):
    parts = ["get", "set", "load", "tensor", "row", "col", "idx", "buf", "n", "ctx", "token",
             "merge", "rank", "piece", "vocab", "tmp", "x", "y", "data", "size", "len", "ptr",
             "head", "dim", "layer", "kv", "cache", "max", "min", "sum", "avg", "out", "in"]
    style = rng.randint(0, 3)
    k = [rng.choice(parts) for _ in range(rng.randint(1, 3))]
    if style == 0:
        name = "_".join(k)
    elif style == 1:
        name = k[0] + "".join(p.capitalize() for p in k[1:])
    elif style == 2:
        name = "".join(p.capitalize() for p in k)
    else:
        name = "_".join(k).upper()
    if rng.random() < 0.2:
        name += str(rng.randint(0, 99))
    return name


def number(rng):
    r = rng.random()
    if r < 0.3:
        return str(rng.randint(0, 10 ** rng.randint(1, 12)))
    if r < 0.5:
        return "%.*f" % (rng.randint(1, 6), rng.uniform(-1e4, 1e4))
    if r < 0.6:
        return "%.3e" % rng.uniform(-1e30, 1e30)
    if r < 0.7:
        return "0x%X" % rng.getrandbits(rng.randint(4, 64))
    if r < 0.8:
        return "-" + str(rng.randint(1, 100000))
    return str(rng.randint(0, 255))


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def gen_prose_en(rng, size):
    out = []
    total = 0
    while total < size:
        para = " ".join(sentence(rng, ENGLISH_WORDS) for _ in range(rng.randint(2, 7)))
        extras = [
            lambda: " See https://example.com/docs/v%d/index.html?q=%s&lang=en#sec-%d." % (
                rng.randint(1, 9), rng.choice(ENGLISH_WORDS), rng.randint(1, 99)),
            lambda: " Mail %s.%s@example.org or call +1 (555) %03d-%04d." % (
                rng.choice(ENGLISH_WORDS), rng.choice(ENGLISH_WORDS), rng.randint(0, 999),
                rng.randint(0, 9999)),
            lambda: " It costs $%d.%02d (about \u20ac%d), i.e. %d%% more than in %d." % (
                rng.randint(1, 999), rng.randint(0, 99), rng.randint(1, 999), rng.randint(1, 99),
                rng.randint(1900, 2030)),
            lambda: " Mr. O'Neil met Dr. Smith at 10:%02d a.m. on Jan. %d, %d." % (
                rng.randint(0, 59), rng.randint(1, 31), rng.randint(1990, 2030)),
            lambda: " #%s @%s %s-%s (%s)" % (rng.choice(ENGLISH_WORDS), rng.choice(ENGLISH_WORDS),
                                            rng.choice(ENGLISH_WORDS), rng.choice(ENGLISH_WORDS),
                                            rng.choice(CONTRACTIONS)),
        ]
        if rng.random() < 0.5:
            para += rng.choice(extras)()
        sep = rng.choice(["\n\n", "\n", "\n\n", " \n", "\n\n\n"])
        out.append(para + sep)
        total += len(para.encode()) + len(sep)
    return "".join(out)


def gen_multilingual(rng, size):
    langs = list(MULTILINGUAL.keys())
    out = []
    total = 0
    while total < size:
        r = rng.random()
        if r < 0.55:
            lang = rng.choice(langs)
            s = " ".join(rng.choice(MULTILINGUAL[lang]) for _ in range(rng.randint(1, 4)))
        elif r < 0.8:
            # Scripts glued together and to ASCII, digits and punctuation.
            bits = []
            for _ in range(rng.randint(2, 6)):
                lang = rng.choice(langs)
                sample = rng.choice(MULTILINGUAL[lang])
                a = rng.randint(0, max(0, len(sample) - 3))
                bits.append(sample[a:a + rng.randint(1, 12)])
                bits.append(rng.choice(["", "", " ", "abc", "Hello", "2024年", "123", "x",
                                        "(", ")", "\u3001", "\u3002", "-", "_", "'s", "\u00a0"]))
            s = "".join(bits)
        else:
            # Random letters of one script, in word-like groups.
            lo, hi = rng.choice([(0x4E00, 0x9FA5), (0x9FA6, 0x9FFF), (0x3400, 0x4DB5),
                                 (0x20000, 0x2A6D6), (0x3041, 0x3096), (0x30A1, 0x30FA),
                                 (0xFF66, 0xFF9D), (0xAC00, 0xD7A3), (0x0400, 0x04FF),
                                 (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0900, 0x097F),
                                 (0x0E00, 0x0E7F), (0x1100, 0x11FF), (0x0370, 0x03FF),
                                 (0x1E00, 0x1EFF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1D)])
            words = []
            for _ in range(rng.randint(3, 12)):
                words.append("".join(random_char(rng, lo, hi) for _ in range(rng.randint(1, 8))))
            s = rng.choice([" ", "", "\u3000", ", "]).join(words)
        if rng.random() < 0.1:
            s = unicodedata.normalize("NFD", s)  # decomposed accents: letter + combining mark
        sep = rng.choice(["\n", " ", "\n\n", "\u3002\n", " "])
        out.append(s + sep)
        total += len((s + sep).encode())
    return "".join(out)


def gen_emoji(rng, size):
    sym = list(SYMBOLS)
    out = []
    total = 0
    while total < size:
        r = rng.random()
        if r < 0.4:
            s = sentence(rng, ENGLISH_WORDS, 3, 10)
            pos = rng.choice(["start", "end", "mid", "glued"])
            e = "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4)))
            if pos == "start":
                s = e + " " + s
            elif pos == "end":
                s = s + " " + e
            elif pos == "mid":
                w = s.split(" ")
                w.insert(rng.randint(0, len(w)), e)
                s = " ".join(w)
            else:
                s = s.replace(" ", e, 1)
        elif r < 0.7:
            s = "".join(rng.choice(EMOJI + sym + [" ", "  ", "\n"]) for _ in range(rng.randint(3, 30)))
        else:
            s = " ".join(rng.choice(sym) + rng.choice(ENGLISH_WORDS) + rng.choice(sym)
                         for _ in range(rng.randint(2, 8)))
        out.append(s + "\n")
        total += len(s.encode()) + 1
    return "".join(out)


def gen_cpp(rng):
    name = ident(rng)
    body = []
    for _ in range(rng.randint(2, 10)):
        k = rng.randint(0, 6)
        v = ident(rng)
        if k == 0:
            body.append("    int64_t %s = %s;  // %s" % (v, number(rng), sentence(rng, ENGLISH_WORDS, 2, 6)))
        elif k == 1:
            body.append("    for (size_t i = 0; i < %s.size(); ++i) {\n        %s[i] += %s * i;\n    }" % (v, v, number(rng)))
        elif k == 2:
            body.append("    if (%s != nullptr && %s->%s >= %d) return %s;" % (v, v, ident(rng), rng.randint(0, 999), v))
        elif k == 3:
            body.append("    std::printf(\"%%s: %%d tokens, %%.2f ms\\n\", %s.c_str(), n, ms);" % v)
        elif k == 4:
            body.append("    auto %s = std::make_unique<std::vector<float>>(%d);" % (v, rng.randint(1, 4096)))
        elif k == 5:
            body.append("    /* %s\n     * %s */" % (sentence(rng, ENGLISH_WORDS), sentence(rng, ENGLISH_WORDS)))
        else:
            body.append("    %s <<= %d; %s |= 0x%x; %s = (%s & ~%s) ^ %s;" % (v, rng.randint(1, 31), v, rng.getrandbits(16), v, v, v, v))
    return ("#include <vector>\n#include \"core/%s.h\"\n\nstatic int %s(const std::vector<int>& %s) {\n%s\n    return 0;\n}\n\n"
            % (ident(rng).lower(), name, ident(rng), "\n".join(body)))


def gen_python(rng):
    lines = ["def %s(%s, %s=None):" % (ident(rng).lower(), ident(rng).lower(), ident(rng).lower()),
             '    """%s"""' % sentence(rng, ENGLISH_WORDS)]
    for _ in range(rng.randint(2, 9)):
        k = rng.randint(0, 5)
        v = ident(rng).lower()
        if k == 0:
            lines.append("    %s = [%s for x in range(%d) if x %% %d == 0]" % (v, "x ** 2", rng.randint(1, 500), rng.randint(2, 9)))
        elif k == 1:
            lines.append("    %s = {'%s': %s, \"%s\": [%s, %s]}" % (v, ident(rng), number(rng), ident(rng), number(rng), number(rng)))
        elif k == 2:
            lines.append("    if not %s:\n        raise ValueError(f\"bad {%s!r}: %s\")" % (v, v, sentence(rng, ENGLISH_WORDS, 2, 5)))
        elif k == 3:
            lines.append("    # %s" % sentence(rng, ENGLISH_WORDS))
        elif k == 4:
            lines.append("    with open('%s.txt', encoding='utf-8') as f:\n        %s = f.read().split('\\n')" % (ident(rng), v))
        else:
            lines.append("    return %s @ %s.T + %s" % (v, v, number(rng)))
    return "\n".join(lines) + "\n\n\n"


def gen_js(rng):
    v = ident(rng)
    return ("export async function %s(%s) {\n  const %s = await fetch(`/api/v1/%s?id=${%s}`);\n"
            "  if (!%s.ok) throw new Error('HTTP ' + %s.status);\n  return %s.json().then((x) => x?.%s ?? []);\n}\n"
            "const %s = [%s, %s, %s].map((n) => n * 2).filter(Boolean); // %s\n\n"
            % (v, ident(rng), v, ident(rng), ident(rng), v, v, v, ident(rng), ident(rng), number(rng),
               number(rng), number(rng), sentence(rng, ENGLISH_WORDS, 2, 6)))


def gen_rust(rng):
    v = ident(rng).lower()
    return ("impl<'a> %s<'a> {\n    pub fn %s(&mut self, xs: &[u32]) -> Result<Vec<u8>, Box<dyn std::error::Error>> {\n"
            "        let %s: Vec<_> = xs.iter().map(|&x| x.wrapping_mul(%d) >> 3).collect();\n"
            "        println!(\"{:?} {:>8.3}\", %s, %s_f64);\n        Ok(vec![0u8; %d])\n    }\n}\n\n"
            % (ident(rng).capitalize(), v, v, rng.randint(1, 1 << 20), v, number(rng).lstrip("-"), rng.randint(1, 999)))


def gen_go(rng):
    return ("func (s *%s) %s(ctx context.Context, n int) (map[string]int, error) {\n\tm := make(map[string]int, n)\n"
            "\tfor i := 0; i < n; i++ {\n\t\tm[fmt.Sprintf(\"k%%03d\", i)] = i * %d\n\t}\n\treturn m, nil\n}\n\n"
            % (ident(rng).capitalize(), ident(rng).capitalize(), rng.randint(1, 99)))


def gen_misc_code(rng):
    k = rng.randint(0, 6)
    if k == 0:
        return "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > %s GROUP BY u.id HAVING n >= %d ORDER BY n DESC LIMIT %d;\n" % (number(rng), rng.randint(1, 9), rng.randint(1, 100))
    if k == 1:
        return "%s:\n\t$(CXX) $(CXXFLAGS) -O%d -o $@ $^ -l%s\n\t@echo \"built $@\"\n\n" % (ident(rng).lower(), rng.randint(0, 3), ident(rng).lower())
    if k == 2:
        return "#!/bin/bash\nset -euo pipefail\nfor f in \"${@:-.}\"/*.txt; do\n  wc -l \"$f\" | awk '{print $1}' >> /tmp/%s.log 2>&1 || true\ndone\n\n" % ident(rng).lower()
    if k == 3:
        return "<div class=\"%s\" id=\"%s\"><p>%s</p><a href=\"https://example.com/?a=1&amp;b=2\">&lt;link&gt;</a></div>\n" % (ident(rng), ident(rng), sentence(rng, ENGLISH_WORDS))
    if k == 4:
        return ".%s > .%s:hover { color: #%06x; margin: %dpx %dem; font-family: \"Noto Sans\", sans-serif; }\n" % (ident(rng), ident(rng), rng.getrandbits(24), rng.randint(0, 64), rng.randint(0, 8))
    if k == 5:
        return "%s:\n  - name: %s\n    value: %s\n    enabled: %s\n    tags: [%s, %s]\n" % (ident(rng).lower(), ident(rng), number(rng), rng.choice(["true", "false", "null"]), ident(rng), ident(rng))
    return "\\begin{equation}\n  \\sum_{i=1}^{%d} x_i^2 = \\frac{\\alpha}{\\beta} \\int_0^\\infty e^{-t} \\, dt\n\\end{equation}\n" % rng.randint(2, 99)


def gen_code(rng, size, crlf_share):
    gens = [gen_cpp, gen_python, gen_js, gen_rust, gen_go, gen_misc_code]
    out = []
    total = 0
    while total < size:
        s = rng.choice(gens)(rng)
        if rng.random() < 0.15:
            s = s.replace("    ", "\t")
        if rng.random() < crlf_share:
            s = s.replace("\n", "\r\n")
        out.append(s)
        total += len(s.encode())
    return "".join(out)


def random_json(rng, depth):
    r = rng.random()
    if depth > 3 or r < 0.3:
        k = rng.randint(0, 6)
        if k == 0:
            return rng.randint(-10 ** 12, 10 ** 12)
        if k == 1:
            return round(rng.uniform(-1e6, 1e6), rng.randint(0, 8))
        if k == 2:
            return rng.choice([True, False, None])
        if k == 3:
            return sentence(rng, ENGLISH_WORDS, 1, 8)
        if k == 4:
            lang = rng.choice(list(MULTILINGUAL.keys()))
            return rng.choice(MULTILINGUAL[lang])
        if k == 5:
            return "line1\nline2\t\"quoted\" \\ back\\slash /path/%d" % rng.randint(0, 99)
        return rng.choice(EMOJI) + ident(rng)
    if r < 0.6:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {ident(rng): random_json(rng, depth + 1) for _ in range(rng.randint(0, 7))}


def gen_json(rng, size):
    out = []
    total = 0
    while total < size:
        obj = random_json(rng, 0)
        k = rng.randint(0, 3)
        if k == 0:
            s = json.dumps(obj, ensure_ascii=False)
        elif k == 1:
            s = json.dumps(obj, ensure_ascii=True)
        elif k == 2:
            s = json.dumps(obj, ensure_ascii=False, indent=2)
        else:
            s = json.dumps(obj, ensure_ascii=False, indent="\t", separators=(",", ": "))
        out.append(s + "\n")
        total += len(s.encode()) + 1
    return "".join(out)


def gen_numbers(rng, size):
    digit_sets = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯",
                  "๐๑๒๓๔๕๖๗๘๙", "０１２３４５６７８９", "⁰¹²³⁴⁵⁶⁷⁸⁹", "₀₁₂₃₄₅₆₇₈₉", "①②③④⑤⑥⑦⑧⑨",
                  "ⅠⅡⅢⅣⅤⅥⅦⅧⅨ", "½¼¾⅓⅔⅛", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗", "〇一二三四五六七八九", "᠐᠑᠒᠓᠔᠕᠖᠗᠘᠙"]
    out = []
    total = 0
    while total < size:
        k = rng.randint(0, 11)
        if k == 0:
            s = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 64)))
        elif k == 1:
            s = "{:,}".format(rng.randint(0, 10 ** 15)) + "." + str(rng.randint(0, 99))
        elif k == 2:
            s = "%d.%d.%d.%d:%d" % (rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255),
                                     rng.randint(0, 255), rng.randint(1, 65535))
        elif k == 3:
            s = "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (rng.randint(1900, 2100), rng.randint(1, 12),
                                                          rng.randint(1, 28), rng.randint(0, 23),
                                                          rng.randint(0, 59), rng.randint(0, 59),
                                                          rng.randint(0, 999))
        elif k == 4:
            s = "v%d.%d.%d-rc.%d+build%d" % tuple(rng.randint(0, 99) for _ in range(5))
        elif k == 5:
            ds = rng.choice(digit_sets)
            s = "".join(rng.choice(ds) for _ in range(rng.randint(1, 20)))
        elif k == 6:
            s = "%s%d%s" % (rng.choice(["abc", "x", "H", "CO", "v", "item_", "é", "ж", "数"]),
                            rng.randint(0, 10 ** 6), rng.choice(["", "th", "st", "px", "kg", "ms", "年", "%"]))
        elif k == 7:
            s = " ".join(number(rng) for _ in range(rng.randint(2, 10)))
        elif k == 8:
            s = "1_000_000 0b%s 0o%o 1e-%d 6.022e23 3/4 -0.0 +42 .5 5. 1'000'000" % (
                bin(rng.getrandbits(16))[2:], rng.getrandbits(12), rng.randint(1, 300))
        elif k == 9:
            s = "| %d | %d | %.2f |" % (rng.randint(0, 9999), rng.randint(0, 99), rng.random() * 100)
        elif k == 10:
            s = "%d%s%d" % (rng.randint(0, 999), rng.choice(["x", "*", "/", ":", "-", "^", "、", "，"]),
                            rng.randint(0, 9999))
        else:
            s = "".join(rng.choice(rng.choice(digit_sets)) + rng.choice(["", " ", ".", ","])
                        for _ in range(rng.randint(2, 15)))
        sep = rng.choice([" ", "\n", ", ", "\t", "\n\n"])
        out.append(s + sep)
        total += len((s + sep).encode())
    return "".join(out)


WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", " \t", "\t ", "\n", "\n\n", "\r\n", "\r",
              "\n\r", "\r\r\n", " \n", "  \n  ", "\f", "\v", "\u00a0", "\u00a0\u00a0", "\u3000",
              "\u2028", "\u2029", "\ufeff", "\u2002", "\u2003", "\u2009", "\u200a", "\u202f",
              "\u205f", "\u1680", "\u0085", "\u200b", "\u180e", " \u00a0 ", "\t\n\t", "\n \n"]


def gen_whitespace(rng, size):
    out = ["   leading spaces\n", "\n\nleading newlines", "\t\ttab-indented\n"]
    total = 0
    while total < size:
        k = rng.randint(0, 7)
        if k == 0:
            s = rng.choice(ENGLISH_WORDS) + rng.choice(WHITESPACE) + rng.choice(ENGLISH_WORDS)
        elif k == 1:
            s = "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 12)))
        elif k == 2:
            s = rng.choice(WHITESPACE) * rng.randint(2, 200)
        elif k == 3:
            s = rng.choice(ENGLISH_WORDS) + rng.choice(WHITESPACE) + rng.choice(
                ["!", "?", "(x)", "123", "中文", "😀", "é", "\u0301", "'s", "-", "\u2014", "$"])
        elif k == 4:
            s = rng.choice(["if x:", "{", "}", "return y;", "- item", "> quote"]) + " " * rng.randint(0, 8) + "\n"
        elif k == 5:
            s = " " * rng.randint(1, 16) + rng.choice(ENGLISH_WORDS) + " " * rng.randint(0, 4) + rng.choice(["\n", "\r\n", ""])
        elif k == 6:
            s = rng.choice(ENGLISH_WORDS) + rng.choice(["\n", "\r\n", "\r"]) * rng.randint(1, 5) + " " * rng.randint(0, 5)
        else:
            s = sentence(rng, ENGLISH_WORDS, 2, 6).replace(" ", rng.choice(WHITESPACE))
        out.append(s)
        total += len(s.encode())
    out.append(" " * 1000 + "x" + "\t" * 300 + "\n" * 200 + "end  \n \t ")
    return "".join(out)


def gen_odd_unicode(rng, size):
    marks = chars_of_category(("Mn", "Me", "Mc"), 0x300, 0x1FFFF)
    controls = [chr(c) for c in list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0))]
    formats = chars_of_category(("Cf",))
    private = [chr(c) for c in (0xE000, 0xE123, 0xF8FF, 0xF0000, 0xFFFFD, 0x100000, 0x10FFFD)]
    nonchars = [chr(c) for c in list(range(0xFDD0, 0xFDF0, 5)) + [0xFFFE, 0xFFFF, 0x1FFFE, 0x10FFFF]]
    specials = ["\ufffd", "\ufffc", "\ufff9", "\ufffa", "\ufffb", "\u00ad", "\u034f", "\u200c",
                "\u200d", "\u2060", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066",
                "\u2067", "\u2068", "\u2069", "\u061c", "\ufe0e", "\ufe0f", "\U000e0100", "\U000e01ef",
                "\U000e0041", "\U000e007f", "\U0001d11e", "\U0001d400", "\U0001d7d8", "\U00013000",
                "\U00012000", "\U00010000", "\u1100\u1161\u11a8", "\u0000", "\x7f"]
    out = []
    total = 0
    while total < size:
        k = rng.randint(0, 9)
        if k == 0:
            s = "".join(random_char(rng, 0, 0x2FFFF) for _ in range(rng.randint(1, 30)))
        elif k == 1:
            s = rng.choice(["", " ", "1", "a", "中", "!", "\n", "\u0915"]) + "".join(
                rng.choice(marks) for _ in range(rng.randint(1, 30)))
        elif k == 2:
            s = rng.choice(ENGLISH_WORDS) + "".join(rng.choice(controls) for _ in range(rng.randint(1, 4))) + rng.choice(ENGLISH_WORDS)
        elif k == 3:
            s = rng.choice(ENGLISH_WORDS) + rng.choice(formats) + rng.choice(ENGLISH_WORDS) + rng.choice(formats)
        elif k == 4:
            s = "".join(rng.choice(private + nonchars + specials) for _ in range(rng.randint(1, 10)))
        elif k == 5:
            s = unicodedata.normalize(rng.choice(["NFD", "NFKD", "NFC", "NFKC"]),
                                      rng.choice(MULTILINGUAL[rng.choice(list(MULTILINGUAL.keys()))]))
        elif k == 6:
            s = "Z" + "".join(rng.choice(marks) for _ in range(rng.randint(10, 60))) + "algo"
        elif k == 7:
            s = "".join(random_char(rng, 0x10000, 0x10FFFF) for _ in range(rng.randint(1, 8)))
        elif k == 8:
            s = "".join(rng.choice(specials) + rng.choice(ENGLISH_WORDS) for _ in range(rng.randint(1, 5)))
        else:
            s = "".join(random_char(rng, 0x80, 0x7FF) for _ in range(rng.randint(1, 20)))
        sep = rng.choice([" ", "\n", "", "\t"])
        out.append(s + sep)
        total += len((s + sep).encode())
    return "".join(out)


def gen_markdown(rng, size):
    out = []
    total = 0
    while total < size:
        k = rng.randint(0, 7)
        if k == 0:
            s = "#" * rng.randint(1, 4) + " " + sentence(rng, ENGLISH_WORDS, 2, 6) + "\n\n"
        elif k == 1:
            s = "".join("%s %s\n" % (rng.choice(["-", "*", "1.", "  -", "- [ ]", "- [x]"]), sentence(rng, ENGLISH_WORDS, 2, 8))
                        for _ in range(rng.randint(2, 6))) + "\n"
        elif k == 2:
            s = "| %s | %s | %s |\n|---|:---:|--:|\n" % (ident(rng), ident(rng), ident(rng))
            s += "".join("| %s | %s | %s |\n" % (number(rng), rng.choice(ENGLISH_WORDS), rng.choice(EMOJI))
                         for _ in range(rng.randint(1, 5))) + "\n"
        elif k == 3:
            s = "```%s\n%s```\n\n" % (rng.choice(["python", "cpp", "", "json", "bash"]),
                                      rng.choice([gen_python, gen_cpp, gen_misc_code])(rng))
        elif k == 4:
            s = "> %s\n> %s\n\n" % (sentence(rng, ENGLISH_WORDS), sentence(rng, ENGLISH_WORDS))
        elif k == 5:
            s = "Inline `code()` and **bold** and _it_ and [link](https://x.org/%s) and $E = mc^2$, $\\sqrt{%d}$.\n\n" % (ident(rng), rng.randint(2, 99))
        elif k == 6:
            s = "<details><summary>%s</summary>\n\n%s\n</details>\n\n" % (ident(rng), sentence(rng, ENGLISH_WORDS))
        else:
            s = sentence(rng, ENGLISH_WORDS) + " " + sentence(rng, ENGLISH_WORDS) + "\n\n"
        out.append(s)
        total += len(s.encode())
    return "".join(out)


def gen_long_pieces(rng):
    blob = base64.b64encode(bytes(rng.getrandbits(8) for _ in range(9000))).decode()
    parts = [
        "a" * 20000, "\n",
        "ab" * 3000, "\n",
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8000)), "\n",
        "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(5000)), "\n",
        "!" * 3000, "\n", " " * 2000, "x\n", "\t" * 500, "\n" * 500,
        blob, "\n",
        "".join(chr(rng.randint(0x0430, 0x044F)) for _ in range(4000)), "\n",
        "e" + "\u0301" * 2000, "\n",
        "https://example.com/" + "/".join(ident(rng) for _ in range(300)), "\n",
        "=" * 1000 + "-" * 1000 + "\n",
        "\U0001F600" * 1000, "\n",
        "9" * 3001, "\n",
    ]
    return "".join(parts)


def gen_roundtrip_files(rng):
    files = {}
    files["random_bytes.bin"] = bytes(rng.getrandbits(8) for _ in range(32768))
    broken = [b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
              b"\xf5", b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x98",
              b"\xf0\x9f", b"\xc2\x00", b"\x00", b"\xe2\x96"]
    chunks = []
    for _ in range(4000):
        chunks.append(rng.choice(broken))
        chunks.append(rng.choice([b"", b" ", b"abc", "中文".encode(), b"\n", b"123", "é".encode(), b"  "]))
    files["broken_utf8.bin"] = b"".join(chunks)
    text = gen_prose_en(rng, 20000).encode()
    cut = bytearray(text)
    for _ in range(300):
        cut[rng.randrange(len(cut))] = rng.getrandbits(8)
    files["corrupted_prose.bin"] = bytes(cut)
    return files


LITERALS = ["<\uff5c", "\uff5c>", "<think>", "</think>", "\uff5cDSML\uff5c", "<|EOT|>"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--scale", type=float, default=1.0, help="size multiplier (default 1)")
    ap.add_argument("--seed", type=int, default=20240531)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    kb = lambda n: int(n * 1024 * args.scale)
    conformance = [
        ("prose_en.txt", lambda: gen_prose_en(rng, kb(200))),
        ("multilingual.txt", lambda: gen_multilingual(rng, kb(330))),
        ("emoji_symbols.txt", lambda: gen_emoji(rng, kb(70))),
        ("code.txt", lambda: gen_code(rng, kb(220), 0.0)),
        ("code_crlf.txt", lambda: gen_code(rng, kb(60), 1.0)),
        ("json.txt", lambda: gen_json(rng, kb(120))),
        ("numbers.txt", lambda: gen_numbers(rng, kb(70))),
        ("whitespace.txt", lambda: gen_whitespace(rng, kb(60))),
        ("odd_unicode.txt", lambda: gen_odd_unicode(rng, kb(100))),
        ("markdown.txt", lambda: gen_markdown(rng, kb(90))),
        ("long_pieces.txt", lambda: gen_long_pieces(rng)),
    ]
    os.makedirs(os.path.join(args.out_dir, "conformance"), exist_ok=True)
    os.makedirs(os.path.join(args.out_dir, "roundtrip"), exist_ok=True)
    total = 0
    for name, fn in conformance:
        text = fn()
        for lit in LITERALS:
            if lit in text:
                sys.exit("gen_tokenizer_corpus: %s contains the special literal %r" % (name, lit))
        data = text.encode("utf-8")  # raises on lone surrogates: the files stay valid UTF-8
        with open(os.path.join(args.out_dir, "conformance", name), "wb") as f:
            f.write(data)
        total += len(data)
    for name, data in gen_roundtrip_files(rng).items():
        with open(os.path.join(args.out_dir, "roundtrip", name), "wb") as f:
            f.write(data)
    print("gen_tokenizer_corpus: %d bytes of conformance text in %s" % (total, args.out_dir))


if __name__ == "__main__":
    main()

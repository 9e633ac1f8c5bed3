// attnlab's tokenizers in JavaScript, segmenting exactly as the run's Python vocabulary does
// (attnlab.data.text.preprocess, attnlab.data.vocab.Vocab and SubwordVocab with style "book"):
//   const tok = AttnTokenizer.load(vocabJson);   // the run's src_vocab.json / tgt_vocab.json, parsed
//   tok.encode("I'm home.") -> ids (no <eos>); tok.decode(ids) -> display text; tok.toTokens(ids) -> strings.
// Word vocabularies: the book's preprocessing, split on spaces, unknown words -> <unk>. BPE (Hugging Face
// tokenizers JSON): the same preprocessing, the special tokens split out, Metaspace ("▁", prepended, split
// before each "▁"), then the merges by rank. Works in the browser (window.AttnTokenizer) and in node.
"use strict";
(function (root) {
  const PUNCT = ",.!?";
  const SPACE_BEFORE = { en: / ([,.!?])/g, fr: / ([,.])/g };

  // attnlab.data.text.preprocess: no-break spaces -> spaces, lowercase, a space before , . ! ? unless one is there.
  function preprocess(text) {
    text = text.replace(/\u202f/g, " ").replace(/\xa0/g, " ").toLowerCase();
    const startsWithMark = text.length > 0 && PUNCT.includes(text[0]);
    for (const mark of PUNCT) {
      if (text.includes(mark)) text = text.split(mark).join(" " + mark).split("  " + mark).join(" " + mark);
    }
    return startsWithMark ? text.slice(1) : text;
  }

  // attnlab.data.text.detokenize: one space between tokens, none before punctuation (French keeps " !" and " ?").
  function detokenize(text, lang) {
    text = text.replace(/ {2,}/g, " ").replace(/^[\s]+|[\s]+$/g, "");
    return text.replace(SPACE_BEFORE[lang === "fr" ? "fr" : "en"], "$1");
  }

  // Cut at the first <eos>, drop <pad> and <bos> (the vocabularies' _strip_specials).
  function stripSpecials(ids, special) {
    const out = [];
    for (const i of ids) {
      if (i === special["<eos>"]) break;
      if (i !== special["<pad>"] && i !== special["<bos>"]) out.push(i);
    }
    return out;
  }

  function wordVocab(obj) {
    const tokens = obj.idx_to_token, index = new Map(tokens.map((t, i) => [t, i]));
    const special = Object.fromEntries(["<unk>", "<pad>", "<bos>", "<eos>"].map((t) => [t, index.get(t)]));
    return {
      kind: "word", lang: obj.lang || null, size: tokens.length, special,
      encode: (text) => preprocess(text).split(" ").filter(Boolean).map((t) => (index.has(t) ? index.get(t) : 0)),
      toTokens: (ids) => ids.map((i) => tokens[i]),
      decode: (ids) => detokenize(stripSpecials(ids, special).map((i) => tokens[i]).join(" "), obj.lang),
    };
  }

  function bpeVocab(obj) {
    const model = obj.model, meta = obj.attnlab || {};
    const vocab = new Map(Object.entries(model.vocab));
    for (const t of obj.added_tokens || []) vocab.set(t.content, t.id);
    const idToToken = [];
    for (const [t, i] of vocab) idToToken[i] = t;
    const ranks = new Map();
    model.merges.forEach((m, r) => {
      const [a, b] = Array.isArray(m) ? m : m.split(" ");
      ranks.set(`${vocab.get(a)} ${vocab.get(b)}`, [r, vocab.get(a + b)]);
    });
    const unk = vocab.get(model.unk_token);
    const rep = (obj.pre_tokenizer && obj.pre_tokenizer.replacement) || "▁";
    const added = (obj.added_tokens || []).map((t) => t.content).sort((a, b) => b.length - a.length);
    const special = Object.fromEntries(["<unk>", "<pad>", "<bos>", "<eos>"].map((t) => [t, vocab.get(t)]));
    const cache = new Map();

    // One pre-tokenized word -> ids: its characters, merged pair by pair, lowest rank first (tokenizers' BPE).
    function word(w) {
      if (cache.has(w)) return cache.get(w);
      let syms = Array.from(w).map((c) => (vocab.has(c) ? vocab.get(c) : unk)).filter((i) => i !== undefined);
      for (;;) {
        let best = null, at = -1;
        for (let i = 0; i + 1 < syms.length; i++) {
          const m = ranks.get(`${syms[i]} ${syms[i + 1]}`);
          if (m && (best === null || m[0] < best[0])) { best = m; at = i; }
        }
        if (best === null) break;
        syms = syms.slice(0, at).concat([best[1]], syms.slice(at + 2));
      }
      cache.set(w, syms);
      return syms;
    }

    // Metaspace: spaces -> "▁", a "▁" in front (unless there), split before every "▁".
    function pieces(text) {
      let s = text.replace(/ /g, rep);
      if (!s.startsWith(rep)) s = rep + s;
      const out = [];
      let cur = "";
      for (const c of s) {
        if (c === rep && cur) { out.push(cur); cur = ""; }
        cur += c;
      }
      if (cur) out.push(cur);
      return out;
    }

    // The special tokens (added tokens) are matched first, leftmost and longest, and never merged.
    function encode(text) {
      text = meta.style === "plain" ? text : preprocess(text);
      const ids = [];
      let rest = text;
      while (rest.length) {
        let hit = -1, which = null;
        for (const a of added) {
          const j = rest.indexOf(a);
          if (j >= 0 && (hit < 0 || j < hit)) { hit = j; which = a; }
        }
        const plain = hit < 0 ? rest : rest.slice(0, hit);
        if (plain) for (const p of pieces(plain)) ids.push(...word(p));
        if (hit < 0) break;
        ids.push(vocab.get(which));
        rest = rest.slice(hit + which.length);
      }
      return ids;
    }

    // tokenizers' Metaspace decoder: "▁" -> " ", except that the first token loses its "▁"s.
    function decode(ids) {
      const toks = stripSpecials(ids, special).map((i) => idToToken[i]);
      const text = toks.map((t, i) => (i === 0 ? t.split(rep).join("") : t.split(rep).join(" "))).join("");
      return detokenize(text, meta.lang);
    }

    return { kind: "bpe", lang: meta.lang || null, size: idToToken.length, special, encode, decode,
      toTokens: (ids) => ids.map((i) => idToToken[i]) };
  }

  const AttnTokenizer = {
    preprocess, detokenize,
    load(obj) {
      if (obj.format === "attnlab.Vocab") return wordVocab(obj);
      if (obj.model && obj.model.type === "BPE") return bpeVocab(obj);
      throw new Error("unsupported vocabulary: expected an attnlab word vocabulary or a BPE tokenizers JSON");
    },
  };
  if (typeof module !== "undefined" && module.exports) module.exports = AttnTokenizer;
  else root.AttnTokenizer = AttnTokenizer;
})(typeof window !== "undefined" ? window : globalThis);

"""Which Data-Juicer 1.6.1 text operators run on CPU without a download: the survey as data.

Each operator was built with ``data_juicer.ops.load_ops([{name: params}])`` and run with
``op.run(NestedDataset.from_list(rows))`` on 20 rows of Debian's docs (tests/data_juicer/corpus.py),
``skip_op_error`` False, in a subprocess with ``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``,
every Data-Juicer cache (``DATA_JUICER_CACHE_HOME``, ``DATA_JUICER_MODELS_CACHE``,
``DATA_JUICER_ASSETS_CACHE``), ``HF_HOME`` and ``NLTK_DATA`` pointed at an empty temp dir,
non-local sockets blocked and Data-Juicer's automatic ``pip install`` of missing packages
refused. Each offline operator gave the same rows under two different ``PYTHONHASHSEED`` values.
The docs page docs/data-juicer-operators.md is the readable form of these lists.
"""

from __future__ import annotations

# Text Mappers that run offline (with PARAMS where given). Deterministic.
OFFLINE_MAPPERS: list[str] = [
    "clean_copyright_mapper",
    "clean_email_mapper",
    "clean_ip_mapper",
    "clean_links_mapper",
    "expand_macro_mapper",
    "extract_tables_from_html_mapper",
    "fix_unicode_mapper",
    "latex_figure_context_extractor_mapper",
    "pii_redaction_mapper",
    "punctuation_normalization_mapper",
    "remove_bibliography_mapper",
    "remove_comments_mapper",
    "remove_header_mapper",
    "remove_long_words_mapper",
    "remove_non_chinese_character_mapper",
    "remove_repeat_sentences_mapper",
    "remove_specific_chars_mapper",
    "remove_table_text_mapper",
    "remove_words_with_incorrect_substrings_mapper",
    "replace_content_mapper",
    "text_chunk_mapper",
    "whitespace_normalization_mapper",
]

# Text Filters that run offline (with PARAMS where given). Deterministic.
OFFLINE_FILTERS: list[str] = [
    "alphanumeric_filter",
    "average_line_length_filter",
    "character_repetition_filter",
    "maximum_line_length_filter",
    "special_characters_filter",
    "text_length_filter",
    "word_repetition_filter",
    "words_num_filter",
]

# Not text operators (they work on any field) but offline too; tried with PARAMS.
OFFLINE_GENERIC: list[str] = [
    "python_lambda_mapper",
    "general_field_filter",
    "specified_field_filter",
    "suffix_filter",
]

# Offline operators left out of recipes/all_offline_text_ops.yaml, and why.
RECIPE_EXCLUDED: dict[str, str] = {
    "latex_figure_context_extractor_mapper": (
        "fans out one row per LaTeX figure with \\includegraphics and drops rows without one:"
        " on plain text every row is dropped"
    ),
}

# Text operators that cannot run here with their default parameters: what they need.
NEEDS_RESOURCE: dict[str, str] = {
    "chinese_convert_mapper": "pip package opencc (Data-Juicer pip-installs it on first use)",
    "clean_html_mapper": "pip package selectolax (Data-Juicer pip-installs it on first use)",
    "nlpaug_en_mapper": "pip package nlpaug; random augmentation (nondeterministic, no seed)",
    "nlpcda_zh_mapper": (
        "pip package nlpcda for any augmentation (with defaults it runs and changes nothing);"
        " random augmentation (nondeterministic, no seed)"
    ),
    "sentence_split_mapper": (
        "pip package nltk + NLTK punkt data (tokenizers/punkt/english.pickle under NLTK_DATA)"
    ),
    "flagged_words_filter": (
        "word list: a *.json file whose name contains 'flagged_words' in"
        " DATA_JUICER_ASSETS_CACHE or the flagged_words_dir parameter"
    ),
    "stopwords_filter": (
        "word list: a *.json file whose name contains 'stopwords' in"
        " DATA_JUICER_ASSETS_CACHE or the stopwords_dir parameter"
    ),
    "language_id_score_filter": "fastText model lid.176.bin in DATA_JUICER_MODELS_CACHE",
    "perplexity_filter": (
        "pip package kenlm + {lang}.sp.model (sentencepiece) and {lang}.arpa.bin (KenLM)"
        " in DATA_JUICER_MODELS_CACHE"
    ),
    "text_action_filter": (
        "pip package spacy + {lang}_core_web_md-3.7.0.tar.gz in DATA_JUICER_MODELS_CACHE"
    ),
    "text_entity_dependency_filter": (
        "pip package spacy + {lang}_core_web_md-3.7.0.tar.gz in DATA_JUICER_MODELS_CACHE"
    ),
    "token_num_filter": (
        "Hugging Face tokenizer EleutherAI/pythia-6.9b-deduped (HF cache or"
        " DATA_JUICER_EXTERNAL_MODELS_HOME/EleutherAI/pythia-6.9b-deduped)"
    ),
    "text_pair_similarity_filter": (
        "Hugging Face model openai/clip-vit-base-patch32 and a text_key_second field"
        " (without text_key_second it keeps every row and loads nothing); GPU used if present"
    ),
    "text_embd_similarity_filter": (
        "an embedding API key (default model text-embedding-v4) or a Hugging Face embedding"
        " model (is_hf_model=True), plus valid_dataset; GPU used if present"
    ),
    "query_intent_detection_mapper": (
        "Hugging Face models bespin-global/klue-roberta-small-3i4k-intent-classification"
        " and Helsinki-NLP/opus-mt-zh-en; GPU used if present"
    ),
    "query_sentiment_detection_mapper": (
        "Hugging Face models mrm8488/distilroberta-finetuned-financial-news-sentiment-analysis"
        " and Helsinki-NLP/opus-mt-zh-en; GPU used if present"
    ),
    "query_topic_detection_mapper": (
        "Hugging Face models dstefa/roberta-base_topic_classification_nyt_news"
        " and Helsinki-NLP/opus-mt-zh-en; GPU used if present"
    ),
    "sentence_augmentation_mapper": (
        "LLM Qwen/Qwen2-7B-Instruct (Hugging Face), GPU advised; needs text_key and"
        " text_key_second (defaults None fail); sampled generation"
    ),
    "text_tagging_by_prompt_mapper": (
        "LLM Qwen/Qwen2.5-7B-Instruct through pip package vllm (GPU) or Hugging Face"
    ),
}

# Offline operators whose optional parameters need a resource (key: op(param=value)).
OPTIONAL_RESOURCE: dict[str, str] = {
    "alphanumeric_filter(tokenization=True)": (
        "Hugging Face tokenizer EleutherAI/pythia-6.9b-deduped"
    ),
    "words_num_filter(tokenization=True)": "{lang}.sp.model in DATA_JUICER_MODELS_CACHE",
    "word_repetition_filter(tokenization=True)": "{lang}.sp.model in DATA_JUICER_MODELS_CACHE",
    "remove_words_with_incorrect_substrings_mapper(tokenization=True)": (
        "{lang}.sp.model in DATA_JUICER_MODELS_CACHE"
    ),
    "flagged_words_filter(tokenization=True)": "{lang}.sp.model in DATA_JUICER_MODELS_CACHE",
    "stopwords_filter(tokenization=True)": "{lang}.sp.model in DATA_JUICER_MODELS_CACHE",
    "text_chunk_mapper(tokenizer=NAME)": (
        "OPENAI_API_KEY set (any value: an API client is built though only the tokenizer is"
        " used) + the tokenizer NAME (tiktoken, dashscope or Hugging Face)"
    ),
}

# Random operators: never in a recipe compared row for row (Data-Juicer gives them no seed).
NONDETERMINISTIC: list[str] = [
    "nlpaug_en_mapper",
    "nlpcda_zh_mapper",
    "sentence_augmentation_mapper",
]

# Parameters that make an operator do something on real text, or let it run at all.
PARAMS: dict[str, dict[str, object]] = {
    # default drop_no_head=True empties every text without a LaTeX section header
    "remove_header_mapper": {"drop_no_head": False},
    # default max_len is sys.maxsize: no word is removed (runs of whitespace still collapse)
    "remove_long_words_mapper": {"min_len": 1, "max_len": 30},
    # default pattern None: nothing is replaced
    "replace_content_mapper": {"pattern": r"\([Cc]\)", "repl": "©"},
    # default (max_len None, split on blank lines) makes ~70 rows of each document
    "text_chunk_mapper": {"max_len": 5000, "split_pattern": r"\n\n"},
    # the generic ones have required arguments
    "python_lambda_mapper": {"lambda_str": "lambda s: {**s, 'text': s['text'].strip()}"},
    "general_field_filter": {"filter_condition": "id != 'nothing'"},
    "specified_field_filter": {"field_key": "id", "target_value": ["synthetic-0"]},
}

# Operators as ordered in recipes/all_offline_text_ops.yaml (mappers, then filters).
RECIPE_ORDER: list[str] = [
    "fix_unicode_mapper",
    "punctuation_normalization_mapper",
    "whitespace_normalization_mapper",
    "clean_copyright_mapper",
    "clean_email_mapper",
    "clean_ip_mapper",
    "clean_links_mapper",
    "pii_redaction_mapper",
    "expand_macro_mapper",
    "remove_bibliography_mapper",
    "remove_comments_mapper",
    "remove_header_mapper",
    "remove_table_text_mapper",
    "remove_specific_chars_mapper",
    "remove_words_with_incorrect_substrings_mapper",
    "remove_long_words_mapper",
    "remove_repeat_sentences_mapper",
    "replace_content_mapper",
    "extract_tables_from_html_mapper",
    "text_chunk_mapper",
    "remove_non_chinese_character_mapper",
    "text_length_filter",
    "alphanumeric_filter",
    "average_line_length_filter",
    "maximum_line_length_filter",
    "character_repetition_filter",
    "word_repetition_filter",
    "special_characters_filter",
    "words_num_filter",
]

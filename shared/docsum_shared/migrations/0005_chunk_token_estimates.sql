-- Each chunk's prompt-token estimate, stored when the chunk is cut (the chunker computes it with
-- docsum_shared.text.estimate_tokens_upper over context_before + text + context_after), so that a
-- task's remaining work is a sum of integers instead of a pass over the chunk texts on every poll.
ALTER TABLE chunks ADD COLUMN token_estimate int;

-- The same estimate in SQL, for the rows cut before this column existed (and rows an older chunker
-- still writes without it): a CJK character or CJK/full-width punctuation mark is a token, other
-- text 3.2 characters a token, rounded up. The character class is text.py's _TOKEN_CJK_RE; keep
-- them in step (tests/integration/test_token_estimates.py compares the two).
CREATE FUNCTION token_estimate_upper(content text) RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (char_length(content) - other) + ceil(other::float8 / 3.2::float8)::int
    FROM (SELECT char_length(regexp_replace(content,
        '[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3007\U00020000-\U0002fa1f'
        '\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f'
        '\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\u3000-\u303f\uff00-\uffef]', '', 'g')) AS other) AS latin
$$;

UPDATE chunks SET token_estimate = token_estimate_upper(context_before || text || context_after)
WHERE token_estimate IS NULL;

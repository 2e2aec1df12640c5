//! Grammatical evolution engine (placeholder until the crate lands).

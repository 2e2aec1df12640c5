//! Rendering and GPU evaluation (placeholder).

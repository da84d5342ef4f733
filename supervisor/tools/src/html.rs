//! HTML to text for webfetch.
//!
//! html2text renders well but its cost grows with the square of the element
//! nesting depth (measured here: 4,000 nested `<div>` take about 120 ms in a
//! release build, 20,000 several seconds), and a page is hostile input. So a
//! linear pre-scan estimates the depth first; past [`MAX_RENDER_DEPTH`] the
//! page is reduced to text by a linear tag stripper instead. Rendering runs
//! on a thread with a large stack, since deep markup also recurses.

use crate::ToolError;

/// Width HTML is rendered at.
const HTML_WIDTH: usize = 100;
/// The stack of the rendering thread.
const HTML_STACK_BYTES: usize = 64 * 1024 * 1024;
/// Above this estimated nesting depth the tag stripper is used.
pub(crate) const MAX_RENDER_DEPTH: usize = 1000;

/// Elements that never have content (no closing tag to expect).
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];

/// How the HTML was turned into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rendering {
    Rendered,
    /// Nested too deeply to render: tags stripped.
    Stripped,
}

pub(crate) async fn html_to_text(body: Vec<u8>) -> Result<(String, Rendering), ToolError> {
    if estimated_depth(&body) > MAX_RENDER_DEPTH {
        return Ok((
            strip_tags(&String::from_utf8_lossy(&body)),
            Rendering::Stripped,
        ));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tollgate-html".into())
        .stack_size(HTML_STACK_BYTES)
        .spawn(move || {
            let rendered = html2text::from_read(&body[..], HTML_WIDTH)
                .map_err(|e| format!("cannot convert the HTML to text: {e}"));
            let _ = tx.send(rendered);
        })
        .map_err(|e| ToolError::Internal(format!("cannot start the HTML thread: {e}")))?;
    match rx.await {
        Ok(Ok(text)) => Ok((text, Rendering::Rendered)),
        Ok(Err(reason)) => Err(ToolError::Internal(reason)),
        Err(_) => Err(ToolError::Internal("the HTML renderer panicked".into())),
    }
}

/// The deepest element nesting, estimated in one pass: opening tags (not
/// void, not self-closing) go one deeper, closing tags one back. Elements
/// whose end tag is optional (`<p>`, `<li>`) over-count, which only errs
/// towards the safe side.
pub(crate) fn estimated_depth(html: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut i = 0;
    while i < html.len() {
        if html[i] != b'<' {
            i += 1;
            continue;
        }
        let rest = &html[i + 1..];
        if rest.starts_with(b"!--") {
            // A comment: skip to its end.
            i += match html[i..].windows(3).position(|w| w == b"-->") {
                Some(end) => end + 3,
                None => html.len() - i,
            };
            continue;
        }
        match rest.first() {
            Some(b'/') => depth = depth.saturating_sub(1),
            Some(c) if c.is_ascii_alphabetic() => {
                let name_len = rest
                    .iter()
                    .position(|b| !b.is_ascii_alphanumeric())
                    .unwrap_or(rest.len());
                let name = String::from_utf8_lossy(&rest[..name_len]).to_ascii_lowercase();
                let end = rest.iter().position(|&b| b == b'>');
                let self_closing = end.is_some_and(|e| e > 0 && rest[e - 1] == b'/');
                if !self_closing && !VOID.contains(&name.as_str()) {
                    depth += 1;
                    max = max.max(depth);
                }
            }
            _ => {}
        }
        i += 1;
    }
    max
}

/// Linear HTML to text: drops `<script>` and `<style>` content and every
/// tag, ends a line at block elements, decodes the common entities, and
/// squeezes blank lines.
pub(crate) fn strip_tags(html: &str) -> String {
    const BLOCK: &[&str] = &[
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "tr",
        "table",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "pre",
        "blockquote",
        "section",
        "article",
        "header",
        "footer",
        "hr",
        "title",
    ];
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.push_str(&decode_entities(&rest[..lt]));
        let after = &rest[lt + 1..];
        let Some(gt) = after.find('>') else {
            rest = "";
            break;
        };
        let tag = &after[..gt];
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        rest = &after[gt + 1..];
        if !tag.starts_with('/') && (name == "script" || name == "style") {
            let close = format!("</{name}");
            match find_ascii_ci(rest, &close) {
                Some(pos) => {
                    rest = &rest[pos..];
                    rest = rest.find('>').map_or("", |g| &rest[g + 1..]);
                }
                None => rest = "",
            }
            continue;
        }
        if BLOCK.contains(&name.as_str()) {
            out.push('\n');
        }
    }
    out.push_str(&decode_entities(rest));
    squeeze_blank_lines(&out)
}

fn find_ascii_ci(haystack: &str, needle: &str) -> Option<usize> {
    let h = haystack.as_bytes();
    let n = needle.as_bytes();
    if n.is_empty() || h.len() < n.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    text.replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

fn squeeze_blank_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    let trimmed = out.trim_matches('\n');
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("{trimmed}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_nesting_not_void_or_self_closing_tags() {
        assert_eq!(estimated_depth(b"<html><body><p>x</p></body></html>"), 3);
        assert_eq!(
            estimated_depth(b"<div><br><img src=x><hr/><div></div></div>"),
            2
        );
        assert_eq!(estimated_depth(b"<!doctype html><!-- <div> --><p>"), 1);
        let deep = "<div>".repeat(5000);
        assert_eq!(estimated_depth(deep.as_bytes()), 5000);
    }

    #[test]
    fn stripping_keeps_text_and_drops_scripts() {
        let html = "<html><head><title>T</title><style>p{}</style></head>\
                    <body><h1>Head &amp; more</h1><p>a <b>b</b></p>\
                    <script>var s = '<p>';</script><SCRIPT>x()</SCRIPT>end</body></html>";
        assert_eq!(strip_tags(html), "T\n\nHead & more\n\na b\nend\n");
    }

    #[tokio::test]
    async fn deep_pages_are_stripped_not_rendered() {
        let mut page = "<div>".repeat(MAX_RENDER_DEPTH + 1);
        page.push_str("bottom");
        let (text, how) = html_to_text(page.into_bytes()).await.unwrap();
        assert_eq!((text.as_str(), how), ("bottom\n", Rendering::Stripped));
        let (text, how) = html_to_text(b"<p>fine</p>".to_vec()).await.unwrap();
        assert_eq!((text.trim(), how), ("fine", Rendering::Rendered));
    }
}

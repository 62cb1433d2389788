//! The web view's files, compiled into the binary (`src/ui/assets/`): hand-written HTML, CSS
//! and JavaScript, no build step and nothing fetched at run time.

/// One embedded file.
pub struct Asset {
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

/// An entity tag for every asset: they change only with the binary.
pub const ETAG: &str = concat!("\"kartograf-", env!("CARGO_PKG_VERSION"), "\"");

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The file at `name` (the path after `/ui/`; empty: the page).
pub fn find(name: &str) -> Option<Asset> {
    let (content_type, body): (&str, &[u8]) = match name {
        "" | "index.html" => (HTML, include_bytes!("assets/index.html")),
        "style.css" => (CSS, include_bytes!("assets/style.css")),
        "dom.js" => (JS, include_bytes!("assets/dom.js")),
        "live.js" => (JS, include_bytes!("assets/live.js")),
        "graph.js" => (JS, include_bytes!("assets/graph.js")),
        "pages.js" => (JS, include_bytes!("assets/pages.js")),
        "app.js" => (JS, include_bytes!("assets/app.js")),
        "favicon.svg" => ("image/svg+xml", include_bytes!("assets/favicon.svg")),
        _ => return None,
    };
    Some(Asset { content_type, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files_and_no_inline_code() {
        let page = std::str::from_utf8(find("").unwrap().body).unwrap();
        for (i, _) in page.match_indices("<script") {
            let tag = &page[i..i + page[i..].find('>').unwrap()];
            assert!(tag.contains("src=\""), "inline script: {tag}");
            let src = tag
                .split("src=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            assert!(find(src).is_some(), "{src} is not embedded");
        }
        assert!(!page.contains("style=\""), "inline style attribute");
        assert!(!page.contains("<style"), "inline style element");
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert!(find("../Cargo.toml").is_none());
    }

    #[test]
    fn no_script_writes_markup() {
        for name in ["dom.js", "live.js", "graph.js", "pages.js", "app.js"] {
            let text = std::str::from_utf8(find(name).unwrap().body).unwrap();
            for banned in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
            ] {
                assert!(!text.contains(banned), "{name} uses {banned}");
            }
        }
    }
}

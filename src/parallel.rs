//! Work shared out over a few threads: each takes the next item when it finishes one (items
//! differ widely in cost, so fixed shares would leave threads idle), the calling thread
//! works too, and results come back in the items' order. Std only: used from the lowest
//! layers (definition compilation) up to the index (resolution).

use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` over `items`, on the calling thread and up to `threads - 1` scoped helper threads
/// named `name` with `stack` bytes of stack, in `items`' order. A helper that cannot be
/// spawned leaves its share to the others; a panic in `f` on a helper is raised here, as it
/// would be inline.
pub fn map_in_order<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    name: &str,
    stack: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if threads < 2 || items.len() < 2 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let mut all: Vec<(usize, R)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads.min(items.len()))
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name(name.to_owned())
                    .stack_size(stack)
                    .spawn_scoped(scope, work)
                    .ok()
            })
            .collect();
        let mut all = work();
        for helper in helpers {
            match helper.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// The cores this process may use (1 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_order_whatever_thread_computed_them() {
        let items: Vec<u64> = (0..500).collect();
        let out = map_in_order(&items, 4, "test-map", 1 << 20, |&n| {
            // Uneven costs, so threads finish out of order.
            std::hint::black_box((0..(n % 7) * 1000).sum::<u64>());
            n
        });
        assert_eq!(out, items);
        assert_eq!(
            map_in_order(&items[..1], 4, "test-map", 1 << 20, |n| n * 2),
            [0]
        );
        assert!(map_in_order(&[] as &[u64], 4, "test-map", 1 << 20, |n| *n).is_empty());
    }

    #[test]
    #[should_panic(expected = "item 7")]
    fn a_panic_on_a_helper_is_raised_on_the_caller() {
        let items: Vec<u64> = (0..64).collect();
        map_in_order(&items, 4, "test-map", 1 << 20, |&n| {
            if n == 7 {
                panic!("item 7");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            n
        });
    }
}

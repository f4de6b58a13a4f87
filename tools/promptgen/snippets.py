"""Small code snippets the coding prompts are built from, with their identifiers and bugs left open.

`@name@` is an identifier slot filled from `names`; `<<<right|||wrong>>>` marks a spot where the fixed
snippet has `right` and the buggy one (for "find the bug" prompts) has `wrong`.
"""

from __future__ import annotations

from homespec.longprompts.material import Snippet
from homespec.longprompts.render import render_snippet

__all__ = ["SNIPPETS", "Snippet", "render_snippet"]


def _s(key: str, lang: str, purpose: str, code: str, **names: str) -> Snippet:
    return Snippet(key, lang, purpose, code, tuple((k, tuple(v.split())) for k, v in names.items()))


SNIPPETS = (
    _s("py-running-max", "python", "returns the running maximum of a list", """
def @fn@(@xs@):
    out = []
    best = None
    for x in @xs@:
        if best is None or x <<<>|||<>>> best:
            best = x
        out.append(best)
    return out
""", fn="running_max prefix_max cumulative_max", xs="values nums readings"),
    _s("py-word-count", "python", "counts how often each word appears in a text", """
def @fn@(text):
    counts = {}
    for word in text.lower().split():
        word = word.strip(".,!?;:")
        if word:
            counts[word] = counts.get(word, <<<0|||1>>>) + 1
    return counts
""", fn="word_counts count_words tally_words"),
    _s("py-chunks", "python", "splits a list into chunks of a given size", """
def @fn@(items, size):
    return [items[i:i + size] for i in range(0, len(items), <<<size|||size - 1>>>)]
""", fn="chunked batches split_every"),
    _s("py-binary-search", "python", "finds the index of a target in a sorted list, or -1", """
def @fn@(@xs@, target):
    lo, hi = 0, len(@xs@) - 1
    while lo <<<<=|||<>>> hi:
        mid = (lo + hi) // 2
        if @xs@[mid] == target:
            return mid
        if @xs@[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
""", fn="binary_search find_sorted bisect_index", xs="arr sorted_values items"),
    _s("py-median", "python", "returns the median of a list of numbers", """
def @fn@(@xs@):
    ordered = sorted(@xs@)
    n = len(ordered)
    mid = n // 2
    if n % 2 == 1:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[<<<mid|||mid + 1>>>]) / 2
""", fn="median middle_value", xs="values samples data"),
    _s("py-dedupe", "python", "removes duplicates from a list while keeping the original order", """
def @fn@(@xs@):
    seen = set()
    result = []
    for item in @xs@:
        if item not in seen:
            <<<seen.add(item)|||pass>>>
            result.append(item)
    return result
""", fn="dedupe unique_in_order remove_duplicates", xs="items entries names"),
    _s("py-fizz", "python", "prints numbers 1 to n, replacing multiples of 3 and 5 with words", """
def @fn@(n):
    for i in range(1, <<<n + 1|||n>>>):
        word = ""
        if i % 3 == 0:
            word += "Ping"
        if i % 5 == 0:
            word += "Pong"
        print(word or i)
""", fn="ping_pong count_with_words"),
    _s("py-merge-intervals", "python", "merges overlapping intervals", """
def @fn@(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = <<<max(merged[-1][1], end)|||end>>>
        else:
            merged.append([start, end])
    return merged
""", fn="merge_intervals join_ranges collapse_spans"),
    _s("py-read-csv", "python", "reads a CSV file and returns the average of one column", """
import csv

def @fn@(path, column):
    total = 0.0
    count = 0
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            total += float(row[column])
            count += 1
    return total / count <<<if count else 0.0|||>>>
""", fn="column_average mean_of_column average_field"),
    _s("py-class-account", "python", "models a bank account with deposits and withdrawals", """
class @cls@:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.balance += amount

    def withdraw(self, amount):
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance <<<-=|||+=>>> amount
""", cls="Account BankAccount Wallet"),
    _s("py-palindrome", "python", "checks whether a phrase is a palindrome, ignoring case and punctuation", """
def @fn@(phrase):
    letters = [c.lower() for c in phrase if c.isalnum()]
    return letters == <<<letters[::-1]|||letters[1:]>>>
""", fn="is_palindrome reads_same_backwards"),
    _s("py-flatten", "python", "flattens a nested list of any depth", """
def @fn@(nested):
    flat = []
    for item in nested:
        if isinstance(item, list):
            flat.<<<extend(@fn@(item))|||append(item)>>>
        else:
            flat.append(item)
    return flat
""", fn="flatten deep_flatten"),
    _s("py-retry", "python", "retries a function a few times before giving up", """
import time

def @fn@(func, attempts=3, delay=0.5):
    for attempt in range(attempts):
        try:
            return func()
        except Exception:
            if attempt == <<<attempts - 1|||attempts>>>:
                raise
            time.sleep(delay * (2 ** attempt))
""", fn="retry with_retries call_with_backoff"),
    _s("py-top-k", "python", "returns the k most common items in a list", """
from collections import Counter

def @fn@(@xs@, k):
    counts = Counter(@xs@)
    return [item for item, _ in counts.most_common(<<<k|||k + 1>>>)]
""", fn="top_k most_common_items", xs="words tags events"),
    _s("py-matrix", "python", "transposes a matrix given as a list of rows", """
def @fn@(rows):
    if not rows:
        return []
    width = len(rows[0])
    return [[row[i] for row in rows] for i in range(<<<width|||width - 1>>>)]
""", fn="transpose flip_matrix"),
    _s("py-temperature", "python", "converts a list of Celsius readings to Fahrenheit and drops invalid ones", """
def @fn@(readings):
    out = []
    for c in readings:
        if c is None or c < -273.15:
            continue
        out.append(c * 9 / 5 <<<+|||->>> 32)
    return out
""", fn="to_fahrenheit convert_readings"),
    _s("py-dict-invert", "python", "inverts a dictionary, grouping keys that share a value", """
def @fn@(mapping):
    inverted = {}
    for key, value in mapping.items():
        inverted.<<<setdefault(value, [])|||get(value, [])>>>.append(key)
    return inverted
""", fn="invert group_by_value"),
    _s("py-rle", "python", "run-length encodes a string", """
def @fn@(text):
    if not text:
        return ""
    out = []
    current, count = text[0], 1
    for ch in text[1:]:
        if ch == current:
            count += 1
        else:
            out.append(f"{current}{count}")
            current, count = ch, 1
    <<<out.append(f"{current}{count}")|||pass>>>
    return "".join(out)
""", fn="run_length_encode rle compress"),
    _s("js-debounce", "javascript", "debounces a callback so it runs only after calls stop", """
function @fn@(callback, waitMs) {
  let timer = null;
  return function (...args) {
    <<<clearTimeout(timer);|||>>>
    timer = setTimeout(() => callback.apply(this, args), waitMs);
  };
}
""", fn="debounce delayCall"),
    _s("js-group-by", "javascript", "groups an array of objects by a key", """
function @fn@(items, key) {
  return items.reduce((groups, item) => {
    const k = item[key];
    (groups[k] ||= []).push(item);
    return groups;
  }, <<<{}|||[]>>>);
}
""", fn="groupBy bucketBy"),
    _s("js-sum-prices", "javascript", "sums the prices in a shopping cart, applying quantities", """
function @fn@(cart) {
  let total = 0;
  for (const line of cart) {
    total += line.price <<<*|||+>>> line.quantity;
  }
  return Math.round(total * 100) / 100;
}
""", fn="cartTotal sumCart"),
    _s("js-fetch-json", "javascript", "fetches JSON from a URL and handles errors", """
async function @fn@(url) {
  const response = await fetch(url);
  if (<<<!response.ok|||response.ok>>>) {
    throw new Error(`request failed: ${response.status}`);
  }
  return response.json();
}
""", fn="getJson fetchJson loadData"),
    _s("js-capitalize", "javascript", "capitalises the first letter of every word", """
function @fn@(sentence) {
  return sentence
    .split(" ")
    .map((w) => w.charAt(0).toUpperCase() + w.slice(<<<1|||0>>>))
    .join(" ");
}
""", fn="titleCase capitalizeWords"),
    _s("ts-queue", "typescript", "implements a simple typed queue", """
class @cls@<T> {
  private items: T[] = [];

  enqueue(item: T): void {
    this.items.push(item);
  }

  dequeue(): T | undefined {
    return this.items.<<<shift()|||pop()>>>;
  }

  get size(): number {
    return this.items.length;
  }
}
""", cls="Queue FifoQueue"),
    _s("go-reverse", "go", "reverses a slice of strings in place", """
func @fn@(s []string) {
	for i, j := 0, len(s)-1; i <<<<|||<=>>> j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
""", fn="reverse reverseInPlace"),
    _s("go-word-freq", "go", "counts word frequencies in a string", """
func @fn@(text string) map[string]int {
	counts := <<<make(map[string]int)|||map[string]int(nil)>>>
	for _, w := range strings.Fields(strings.ToLower(text)) {
		counts[w]++
	}
	return counts
}
""", fn="wordFreq countWords"),
    _s("go-sum-file", "go", "reads numbers from a file, one per line, and returns their sum", """
func @fn@(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sum := 0
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(scanner.Text()))
		if err != nil {
			return 0, err
		}
		sum <<<+=|||=>>> n
	}
	return sum, scanner.Err()
}
""", fn="sumFile totalFromFile"),
    _s("rust-mean", "rust", "returns the mean of a slice of floats, or None when it is empty", """
fn @fn@(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let total: f64 = values.iter().sum();
    Some(total / values.len() as f64<<<|||  + 1.0>>>)
}
""", fn="mean average"),
    _s("rust-count-vowels", "rust", "counts the vowels in a string", """
fn @fn@(s: &str) -> usize {
    s.chars()
        .filter(|c| "aeiou".contains(<<<c.to_ascii_lowercase()|||*c>>>))
        .count()
}
""", fn="count_vowels vowels"),
    _s("c-max", "c", "returns the largest value in an array of ints", """
int @fn@(const int *values, size_t n) {
    int best = values[0];
    for (size_t i = 1; i <<<<|||<=>>> n; i++) {
        if (values[i] > best) {
            best = values[i];
        }
    }
    return best;
}
""", fn="max_value array_max"),
    _s("c-strlen", "c", "computes the length of a C string", """
size_t @fn@(const char *s) {
    size_t n = 0;
    while (s[n] != <<<'\\0'|||'0'>>>) {
        n++;
    }
    return n;
}
""", fn="my_strlen string_length"),
    _s("java-fizz", "java", "checks whether a year is a leap year", """
public static boolean @fn@(int year) {
    if (year % 400 == 0) return true;
    if (year % 100 == 0) return <<<false|||true>>>;
    return year % 4 == 0;
}
""", fn="isLeapYear leapYear"),
    _s("sql-top-customers", "sql", "lists the five customers who spent the most last year", """
SELECT c.name, SUM(o.total) AS spent
FROM customers c
JOIN orders o ON o.customer_id = c.id
WHERE o.created_at >= DATE '2023-01-01' AND o.created_at < DATE '2024-01-01'
GROUP BY c.name
ORDER BY spent <<<DESC|||ASC>>>
LIMIT 5;
"""),
    _s("sql-missing", "sql", "finds products that have never been ordered", """
SELECT p.id, p.name
FROM products p
LEFT JOIN order_items oi ON oi.product_id = p.id
WHERE <<<oi.product_id IS NULL|||oi.product_id = NULL>>>;
"""),
    _s("bash-backup", "bash", "backs up a directory into a dated tar archive", """
#!/usr/bin/env bash
set -euo pipefail
src="$1"
dest="${2:-$HOME/backups}"
mkdir -p "$dest"
stamp=$(date +%Y-%m-%d)
tar -czf "$dest/$(basename "$src")-$stamp.tar.gz" <<<-C "$(dirname "$src")" "$(basename "$src")"|||"$src">>>
echo "saved to $dest"
"""),
    _s("bash-count-lines", "bash", "counts the lines in every .log file in a folder", """
#!/usr/bin/env bash
for f in <<<"$1"/*.log|||$1/*.log>>>; do
  [ -e "$f" ] || continue
  printf '%s %s\\n' "$(wc -l < "$f")" "$f"
done | sort -n
"""),
)

"""Coding: write functions from a description, explain/fix/refactor composed snippets, explain concepts."""

from __future__ import annotations

import random

from tools.promptgen.design import Pool, Template, fill, lines
from tools.promptgen.snippets import SNIPPETS, Snippet, render_snippet
from tools.promptgen.words import LIGHT_MODIFIERS

LANGS = lines("""
Python
JavaScript
TypeScript
Go
Rust
C
C++
Java
C#
Ruby
Kotlin
Swift
PHP
Lua
""")

# Each completes "a function that ...".
TASKS = lines("""
returns the second largest number in a list
checks whether two strings are anagrams
converts a Roman numeral to an integer
converts an integer to its Roman numeral
rotates a list by k positions
finds the longest word in a sentence
counts the vowels in a string
returns the nth Fibonacci number without recursion
checks whether a number is prime
returns all prime numbers below n
computes the greatest common divisor of two integers
validates a simple email address
parses a date in the form YYYY-MM-DD and returns the day of the week
formats a number of seconds as hours, minutes and seconds
returns the intersection of two lists without duplicates
finds the first character that does not repeat in a string
checks whether brackets in a string are balanced
reverses the words in a sentence but not the letters
computes a moving average over a window of size k
groups a list of words by their first letter
finds the missing number in a list containing 1 to n with one gap
merges two sorted lists into one sorted list
returns the k closest points to the origin
converts a hex colour like #ff8800 to RGB values
calculates the Levenshtein distance between two words
compresses repeated spaces into a single space
removes vowels from a string
checks whether a sudoku row is valid
counts the islands in a grid of 0s and 1s
finds the longest common prefix of a list of strings
splits a full name into first and last name
returns the mode of a list of numbers
shuffles a list using the Fisher-Yates algorithm
generates a random password with letters, digits and symbols
calculates the total price of a basket with a discount code
converts temperatures between Celsius, Fahrenheit and Kelvin
checks whether a year is a leap year
finds all pairs in a list that add up to a target
returns the running total of a list of numbers
counts the words in a text file
parses a query string into a dictionary
turns a nested dictionary into dotted keys
capitalises the first letter of each sentence
truncates a string to n characters and adds an ellipsis
calculates compound interest for a number of years
checks whether a linked list has a cycle
implements a stack with push, pop and peek
implements a least-recently-used cache of fixed size
finds the median of two sorted arrays
computes the power set of a small list
returns the number of days between two dates
checks whether a string is a valid IPv4 address
converts a CSV line with quoted fields into a list
pads a number with leading zeros to a given width
returns the digits of a number in reverse order
sums the digits of an integer
finds the most frequent character in a string
removes duplicate lines from a text while keeping order
computes the dot product of two vectors
multiplies two matrices
checks whether a binary tree is balanced
returns the depth of a binary tree
performs a breadth-first search on a graph given as an adjacency list
finds the shortest path in an unweighted grid
converts a snake_case name to camelCase
converts camelCase to snake_case
wraps text to a maximum line width
counts the occurrences of a substring, including overlapping ones
returns the list of all permutations of a short string
checks whether a number is a perfect square without using sqrt
converts a binary string to a decimal integer
returns a histogram of word lengths in a text
interleaves two lists
splits a list into two halves, putting the extra item in the first half
finds the index of the peak element in a list that rises then falls
simulates rolling two dice 10,000 times and reports the frequencies
validates a credit card number with the Luhn check
converts a duration like 1h30m into minutes
rounds a price to the nearest 5 cents
returns the elements that appear in exactly one of two lists
finds the longest run of consecutive equal values in a list
checks whether a list is sorted
builds a frequency table from a list of survey answers
returns the top three scores with the names of their players
calculates the area of a polygon from its vertices
determines the winner of a tic-tac-toe board
parses simple arithmetic like 3 + 4 * 2 and evaluates it
encodes a string with a Caesar cipher
decodes a Caesar cipher when the shift is unknown by trying all shifts
""")

PROG_CONCEPTS = lines("""
a closure
recursion
a hash map
big-O notation
a race condition
immutability
dependency injection
a generator or iterator
garbage collection
the difference between a process and a thread
a mutex
memoisation
a pure function
an interface
inheritance versus composition
unit tests versus integration tests
a REST API
a database index
SQL joins
a foreign key
a deadlock
floating-point rounding errors
Unicode versus bytes
regular expressions
git rebase versus git merge
a merge conflict
continuous integration
semantic versioning
a memory leak
a stack overflow
the event loop
async and await
a linked list
a binary search tree
a heap or priority queue
dynamic programming
a null pointer
type inference
a virtual environment
environment variables
caching
idempotent requests
pagination in an API
a Docker container
a code review
technical debt
off-by-one errors
integer overflow
lazy evaluation
a lambda function
exceptions versus error codes
the single-responsibility principle
logging levels
a hash collision
bit masks
a trie
a queue versus a stack
a callback
string interpolation
""")

_WRITE = {
    "write": "Write a {lang} function that {t}.",
    "with-example": "I need a {lang} function that {t}. Include a short example of calling it.",
    "explain-approach": "Show me how to implement a function that {t} in {lang}, and explain your approach.",
    "edge-cases": "Write a {lang} function that {t}, then list the edge cases it handles.",
    "two-ways": "Give me two different {lang} implementations of a function that {t} and compare them.",
    "no-libs": "Write a function that {t}. Use {lang} and no external libraries.",
    "with-tests": "Write a {lang} function that {t}, together with a few tests.",
    "simplest": "What's the simplest way to write a function that {t} in {lang}?",
    "pseudocode": "Write pseudocode for a function that {t}, then translate it to {lang}.",
    "interview": "Interview question: write a function that {t}. Answer in {lang} and state the time complexity.",
    "beginner": "I'm new to {lang}. Could you write a function that {t} and comment every line?",
    "one-liner": "Is there a short, idiomatic {lang} way to write a function that {t}?",
}

_SNIPPET = {
    "explain": "Explain what this {lang} code does:\n\n```{lang}\n{code}\n```",
    "line-by-line": "Go through this {lang} code line by line and say what each part does.\n\n```{lang}\n{code}\n```",
    "fix": "This {lang} code is supposed to be a function that {purpose}, but it gives wrong results. Find and fix the bug.\n\n```{lang}\n{buggy}\n```",
    "whats-wrong": "Something is wrong with this code. What is it, and how would you fix it?\n\n```{lang}\n{buggy}\n```",
    "refactor": "Refactor this {lang} code to make it easier to read. Keep the behaviour the same.\n\n```{lang}\n{code}\n```",
    "tests": "Write unit tests for this {lang} code. Cover the normal case and the edge cases.\n\n```{lang}\n{code}\n```",
    "document": "Add a docstring or doc comment and helpful comments to this code:\n\n```{lang}\n{code}\n```",
    "translate": "Rewrite this {lang} code in {other}.\n\n```{lang}\n{code}\n```",
    "complexity": "What is the time and space complexity of this code? Explain briefly.\n\n```{lang}\n{code}\n```",
    "review": "Review this {lang} code as if it were a pull request from a colleague. Be specific.\n\n```{lang}\n{code}\n```",
    "break-it": "What inputs would make this code fail or behave oddly?\n\n```{lang}\n{code}\n```",
    "rename": "Suggest clearer names for the function and variables in this code, and show the result.\n\n```{lang}\n{code}\n```",
    "will-it-work": "A colleague says this {lang} function {purpose}. Are they right?\n\n```{lang}\n{buggy}\n```",
}

_CONCEPT = {
    "explain-example": "Explain {c} with a short {lang} example.",
    "when-to-use": "When should I use {c}, and when should I avoid it?",
    "interview-answer": "How would you explain {c} in a job interview?",
    "analogy": "Give me a real-world analogy for {c}, then show it in {lang}.",
    "pitfalls": "What are the common pitfalls around {c}?",
    "beginner-question": "I keep hearing about {c}. What is it, in plain words?",
}


def _code_constraint(text: str, rng: random.Random) -> str:
    return text + " " + rng.choice((
        "Use only the standard library.", "Don't use recursion.", "Explain the solution afterwards in two sentences.",
        "Add type annotations where the language has them.", "Prefer readability over cleverness.",
        "Handle invalid input with a clear error.", "Keep it under 30 lines.", "Include a docstring or doc comment.",
        "Mention the time complexity.", "Assume the input can be very large.",
    ))


def _write(key: str, template: str) -> Template:
    def render(task: str, rng: random.Random) -> str:
        return fill(template, rng, lang=LANGS, t=task)

    return Template(key, render)


def _snippet(key: str, template: str) -> Template:
    def render(snippet: Snippet, rng: random.Random) -> str:
        lang = snippet.lang
        others = [lang_ for lang_ in LANGS if lang_.lower() != lang]
        return template.format(
            lang=lang,
            code=render_snippet(snippet, rng),
            buggy=render_snippet(snippet, rng, buggy=True),
            purpose=snippet.purpose,
            other=rng.choice(others),
        )

    return Template(key, render)


def _concept(key: str, template: str) -> Template:
    def render(concept: str, rng: random.Random) -> str:
        return fill(template, rng, c=concept, lang=LANGS)

    return Template(key, render)


POOLS = (
    Pool(
        "coding.write",
        "coding",
        TASKS,
        tuple(_write(k, t) for k, t in _WRITE.items()),
        share=0.5,
        topic_key=lambda t: "codetask:" + t,
        modifiers=(_code_constraint, _code_constraint) + LIGHT_MODIFIERS[1:2],
        modifier_rate=0.35,
    ),
    Pool(
        "coding.snippet",
        "coding",
        SNIPPETS,
        tuple(_snippet(k, t) for k, t in _SNIPPET.items()),
        share=0.3,
        topic_key=lambda s: "snippet:" + s.key,
    ),
    Pool(
        "coding.concept",
        "coding",
        PROG_CONCEPTS,
        tuple(_concept(k, t) for k, t in _CONCEPT.items()),
        share=0.2,
        topic_key=lambda c: "progconcept:" + c,
        modifiers=LIGHT_MODIFIERS,
        modifier_rate=0.3,
    ),
)

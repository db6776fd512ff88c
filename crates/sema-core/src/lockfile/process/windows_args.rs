//! The words of a Windows command line. Windows keeps a process's command line as one string, and
//! each program's C runtime splits it into `argv` before `main`; this is that split (the Microsoft
//! C runtime's rule since 2008, which `node.exe` and most programs use), pure, so that it is tested
//! on every system. `CommandLineToArgvW` is not used: it reads `""` inside quotes by the older rule.

/// Splits `line` as the C runtime does: blanks (space, tab) separate words outside double quotes;
/// 2n backslashes before a quote are n backslashes and the quote opens or closes quoting, 2n+1 are
/// n backslashes and a literal quote; other backslashes are literal; `""` inside quotes is a
/// literal quote (and quoting goes on).
pub fn split_windows_command_line(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let run = chars[i..].iter().take_while(|&&c| c == '\\').count();
                i += run;
                if chars.get(i) == Some(&'"') {
                    word.extend(std::iter::repeat_n('\\', run / 2));
                    if run % 2 == 1 {
                        word.push('"');
                        i += 1;
                    }
                    // An even run: the quote opens or closes quoting, on the next turn.
                } else {
                    word.extend(std::iter::repeat_n('\\', run));
                }
                in_word = true;
            }
            '"' => {
                if quoted && chars.get(i + 1) == Some(&'"') {
                    word.push('"');
                    i += 2;
                } else {
                    quoted = !quoted;
                    i += 1;
                }
                in_word = true;
            }
            ' ' | '\t' if !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                }
                in_word = false;
                i += 1;
            }
            c => {
                word.push(c);
                in_word = true;
                i += 1;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::split_windows_command_line as split;

    #[test]
    fn npm_s_cmd_exe_line() {
        assert_eq!(
            split(
                r#"C:\WINDOWS\system32\cmd.exe /d /s /c ""C:\n\node.exe" "C:\a b\x.js" acquire y""#
            ),
            [
                "C:\\WINDOWS\\system32\\cmd.exe",
                "/d",
                "/s",
                "/c",
                "C:\\n\\node.exe C:\\a",
                "b\\x.js acquire y"
            ]
        );
    }

    #[test]
    fn backslashes_quotes_and_blanks() {
        assert_eq!(
            split("a\\\\\"b c\" d\\\"e \"f\"\"g\" h\\i\t j"),
            ["a\\b c", "d\"e", "f\"g", "h\\i", "j"]
        );
        assert_eq!(split(r#"x\\\\"y z" \\\"w"#), [r"x\\y z", r#"\"w"#]);
        assert_eq!(
            split(r#""" a"#),
            ["", "a"],
            "an empty quoted word is a word"
        );
        assert_eq!(split("  \t "), Vec::<String>::new());
        assert_eq!(split(r"trailing\\"), [r"trailing\\"]);
        assert_eq!(split("é \"ü ö\""), ["é", "ü ö"]);
    }
}
